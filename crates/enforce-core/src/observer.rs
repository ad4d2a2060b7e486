//! Watching the loop as it runs: [`Observer`] and [`Event`].

use crate::{Issue, Status};
use std::fmt;

/// Something that happened in the loop. The proxy turns these into keep-alives, status events
/// and metrics; the demo prints them.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// The runner is being asked (attempt numbers start at 1).
    Asking {
        /// Attempt number.
        attempt: u32,
        /// Most attempts this enforcement may make.
        max_attempts: u32,
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
    /// The loop is done.
    Finished {
        /// The verdict.
        status: Status,
    },
}

/// Receives [`Event`]s. Called inline from the loop, so it must be quick (send to a channel,
/// bump a counter).
pub trait Observer: Send + Sync {
    /// Called for each event.
    fn on_event(&self, event: &Event<'_>);
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
