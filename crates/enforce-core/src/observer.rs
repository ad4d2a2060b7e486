//! Watching the loop as it runs: [`Observer`] and [`Event`].

use crate::{Attempt, Issue, Status};
use std::fmt;
use std::time::Duration;

/// Something that happened in the loop. The proxy turns these into keep-alives, status events
/// and metrics; the demo prints them.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// The input stage checked the request before the first model call.
    InputChecked {
        /// What it found and did.
        check: &'a crate::input::InputCheck,
    },
    /// The runner is being asked (attempt numbers start at 1).
    Asking {
        /// Attempt number.
        attempt: u32,
        /// Most attempts this enforcement may make.
        max_attempts: u32,
    },
    /// More text of a streamed answer arrived.
    Streamed {
        /// Attempt number.
        attempt: u32,
        /// The new text (a delta, not the whole answer so far).
        text: &'a str,
    },
    /// More of the model's own reasoning arrived (not part of the answer, never validated).
    Reasoning {
        /// Attempt number.
        attempt: u32,
        /// The new reasoning text (a delta).
        text: &'a str,
    },
    /// A streamed answer was cut short at a definite error; a re-ask follows unless a stop
    /// rule (no progress, budget) ends the loop.
    Cut {
        /// Attempt number.
        attempt: u32,
        /// Bytes received before the cut.
        bytes: usize,
        /// The definite errors that cut it.
        issues: &'a [Issue],
    },
    /// A response was validated.
    Validated {
        /// Attempt number.
        attempt: u32,
        /// The response text.
        response: &'a str,
        /// Every issue found.
        issues: &'a [Issue],
    },
    /// An attempt was recorded for the audit, as it will appear in the outcome (a repair
    /// applied later is added to the outcome's copy only). A caller that may have to stop the
    /// loop from outside (a deadline) keeps these to audit the attempts made so far
    /// ([`Outcome::interrupted`](crate::Outcome::interrupted)).
    Recorded {
        /// The attempt.
        attempt: &'a Attempt,
    },
    /// The runner is asked again with feedback.
    Retrying {
        /// The number of the attempt about to be made.
        attempt: u32,
        /// Most attempts this enforcement may make.
        max_attempts: u32,
        /// The errors that caused the re-ask.
        issues: &'a [Issue],
        /// The feedback text sent.
        feedback: &'a str,
    },
    /// A validator's repair changed the response.
    Repaired {
        /// The validator.
        validator: &'a str,
    },
    /// One validator checked a text. Sent only to observers whose
    /// [`Observer::wants_validator_runs`] says so: timing each validator costs a clock read per
    /// validator, which nobody should pay for when nobody listens. Sent in validator order,
    /// before [`Event::Validated`] of the same attempt.
    ValidatorRan {
        /// Attempt number whose response was checked (the re-check of a repaired text carries
        /// the last attempt's number).
        attempt: u32,
        /// The validator (a group's members are reported one by one).
        validator: &'a str,
        /// The issues it found, named; a fail-open validator without verdict has its
        /// `VALIDATOR_UNAVAILABLE` warning here.
        issues: &'a [Issue],
        /// Why it gave no verdict, if it gave none.
        unavailable: Option<&'a str>,
        /// How long it took.
        elapsed: Duration,
        /// The text checked was the repaired one, not a model's response.
        repaired: bool,
    },
    /// The loop is done.
    Finished {
        /// The verdict.
        status: Status,
    },
}

/// Receives [`Event`]s. Called inline from the loop, so it must be quick (send to a channel,
/// bump a counter). A closure `Fn(&Event)` is an observer too.
///
/// ```
/// use enforce_core::{Context, Enforcer, Event, Observer, Request, ScriptedRunner, Status};
/// use std::sync::atomic::{AtomicU32, Ordering};
/// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     let mut f = std::pin::pin!(f);
/// #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
/// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
/// # }
///
/// /// Counts the asks, e.g. for a metric.
/// #[derive(Default)]
/// struct AskCounter(AtomicU32);
///
/// impl Observer for AskCounter {
///     fn on_event(&self, event: &Event<'_>) {
///         // Events are non-exhaustive: new kinds may arrive, so keep a catch-all.
///         match event {
///             Event::Asking { .. } => { self.0.fetch_add(1, Ordering::Relaxed); }
///             _ => {}
///         }
///     }
/// }
///
/// let counter = AskCounter::default();
/// let runner = ScriptedRunner::texts(["any answer"]);
/// let enforcer = Enforcer::new(Vec::new());
/// let outcome = block_on(enforcer.run_observed(
///     &runner, &Request::prompt("Hi"), &Context::new(), &counter,
/// ));
/// assert_eq!(outcome.status, Status::Passed);
/// assert_eq!(counter.0.load(Ordering::Relaxed), 1);
/// ```
pub trait Observer: Send + Sync {
    /// Called for each event.
    fn on_event(&self, event: &Event<'_>);

    /// Whether to send an [`Event::ValidatorRan`] for every validator run (default: no). The
    /// loop asks once per enforcement.
    fn wants_validator_runs(&self) -> bool {
        false
    }

    /// Whether this observer shows answers as they arrive ([`Event::Streamed`],
    /// [`Event::Reasoning`]; default: no). The loop streams an attempt when this says yes or
    /// when a partial check could cut it; otherwise it asks for the whole answer, which spares a
    /// streaming round for nothing.
    fn wants_deltas(&self) -> bool {
        false
    }
}

impl fmt::Debug for dyn Observer + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer").finish_non_exhaustive()
    }
}

/// Observes nothing.
impl Observer for () {
    fn on_event(&self, _event: &Event<'_>) {}
}

impl<F: Fn(&Event<'_>) + Send + Sync> Observer for F {
    fn on_event(&self, event: &Event<'_>) {
        self(event)
    }
}
