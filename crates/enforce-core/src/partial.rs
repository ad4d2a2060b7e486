//! Checking an answer while it is written: [`PartialCheck`].

use crate::Issue;
use async_trait::async_trait;
use std::fmt;

/// Follows one answer while the model writes it, for one validator: the loop feeds it the
/// growing text and cuts the generation short when it reports an error that no continuation can
/// remove. Made by [`Validator::partial_check`](crate::Validator::partial_check), one per attempt.
///
/// **The partial-check invariant:** an error returned for a prefix must be an error of every
/// text that starts with that prefix — a *definite* error — **and not one the validator's
/// repair would fix for some continuation**: the finished answer, repaired, must still fail. A
/// forbidden term wholly inside the prefix (and not at its end, where the next bytes could
/// still turn it into a longer word) is definite; a missing closing marker is not (it may still
/// come), nor is a code fence around JSON that the repair strips. When in doubt, return
/// nothing: a missed early abort costs only time, a wrong one throws away a good answer.
///
/// A checker keeps what it needs between calls (how far it has looked, a parser's state), so
/// each call costs about the new bytes, not the whole prefix. A checker that rescans is
/// correct too, just O(prefix) per call.
///
/// ```
/// use enforce_core::{async_trait, Context, Issue, PartialCheck, Severity, Validation, Validator};
/// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     let mut f = std::pin::pin!(f);
/// #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
/// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
/// # }
///
/// /// No line may be longer than 20 bytes.
/// struct ShortLines;
///
/// /// Remembers where the current line started, so each call reads only the new bytes.
/// struct LineLengths { line_start: usize, seen: usize }
///
/// #[async_trait]
/// impl PartialCheck for LineLengths {
///     async fn check(&mut self, prefix: &str) -> Vec<Issue> {
///         for (i, b) in prefix.bytes().enumerate().skip(self.seen) {
///             if b == b'\n' { self.line_start = i + 1; }
///         }
///         self.seen = prefix.len();
///         // Bytes already written stay written: a line this long can only grow.
///         if prefix.len() - self.line_start > 20 {
///             return vec![Issue::new(Severity::Error, "LONG_LINE", "A line is longer than 20 bytes.")];
///         }
///         Vec::new()
///     }
/// }
///
/// #[async_trait]
/// impl Validator for ShortLines {
///     fn name(&self) -> &str { "short_lines" }
///     async fn validate(&self, response: &str, _: &Context) -> Validation {
///         Ok(response.lines().filter(|l| l.len() > 20).map(|_|
///             Issue::new(Severity::Error, "LONG_LINE", "A line is longer than 20 bytes.")).collect())
///     }
///     fn partial_check<'a>(&'a self, _: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
///         Some(Box::new(LineLengths { line_start: 0, seen: 0 }))
///     }
/// }
///
/// let context = Context::new();
/// let mut check = ShortLines.partial_check(&context).unwrap();
/// assert!(block_on(check.check("short\nalso sh")).is_empty());
/// assert_eq!(block_on(check.check("short\nalso short, but this one goes on")).len(), 1);
/// ```
#[async_trait]
pub trait PartialCheck: Send {
    /// Checks the answer so far and returns the definite issues found (see the trait docs).
    ///
    /// `prefix` is everything received; each call's prefix extends the previous call's. The
    /// issues may repeat ones returned before. The loop cuts only for errors a re-ask is meant
    /// to fix (`repairable`, and not fixed by the validator's own repair): warnings and hard
    /// aborts returned here never cut anything.
    async fn check(&mut self, prefix: &str) -> Vec<Issue>;
}

impl fmt::Debug for dyn PartialCheck + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PartialCheck").finish_non_exhaustive()
    }
}
