//! The engine's one timer: a lower bound of every deadline armed (acks, resends,
//! connects, liveness probes, pull blocks), so that `poll_timeout`, asked on every
//! progress pass, is O(1) instead of a scan of every partner and pull.

use crate::types::Time;

/// No deadline is earlier than `hint`; `Time::MAX` when none is armed. Lowered
/// wherever a deadline is armed, set back to the exact earliest one after timeouts
/// were handled. It may be early (a deadline since cleared), never late.
pub(crate) struct Timer {
    hint: Time,
}

impl Default for Timer {
    fn default() -> Self {
        Timer { hint: Time::MAX }
    }
}

impl Timer {
    /// A deadline was armed at `at`.
    pub fn arm(&mut self, at: Time) {
        self.hint = self.hint.min(at);
    }

    /// The exact earliest deadline, recomputed.
    pub fn reset(&mut self, earliest: Option<Time>) {
        self.hint = earliest.unwrap_or(Time::MAX);
    }

    pub fn next(&self) -> Option<Time> {
        (self.hint != Time::MAX).then_some(self.hint)
    }

    /// Whether the hint is no later than `deadline` (the timer's invariant).
    pub fn covers(&self, deadline: Time) -> bool {
        self.hint <= deadline
    }
}
