//! How long a blocking wait busy-polls before it sleeps.
//!
//! Waking a sleeping thread costs tens of microseconds here (the reply's CPU must be
//! woken), so a wait that sleeps through a short gap loses most of omx's lead: an
//! application that computes 10-100 µs between messages saw 20 µs one way instead of
//! 2 µs. The spin therefore follows the application: it covers the waits that recently
//! ended with a completion, up to a cap, and falls back to the base budget when they
//! were longer than the cap (an idle application costs no more CPU than before).

use super::Spin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Recent completed waits remembered.
const HISTORY: usize = 8;
/// The spin covers this many of the remembered waits (the 75th percentile).
const COVERED: usize = HISTORY * 3 / 4;
/// Slack over the covered wait, as a fraction (1/4) and a constant (µs).
const SLACK_SHIFT: u32 = 2;
const SLACK_US: u32 = 5;

/// Durations (µs, saturated) of the last waits that ended with a completion.
#[derive(Default)]
pub(super) struct SpinAdvisor {
    recent: [AtomicU32; HISTORY],
    next: AtomicU32,
}

impl SpinAdvisor {
    /// A wait ended with its completion after `waited_ns`.
    #[inline]
    pub(super) fn record(&self, waited_ns: u64) {
        let slot = self.next.fetch_add(1, Ordering::Relaxed) as usize % HISTORY;
        let us = (waited_ns / 1_000).min(u32::MAX as u64) as u32;
        self.recent[slot].store(us, Ordering::Relaxed);
    }

    /// The spin budget of a wait that asked for `spin`: none when it skips the spin.
    pub(super) fn budget_of(&self, spin: Spin, base: Duration, cap: Duration) -> Duration {
        match spin {
            Spin::Adaptive => self.budget(base, cap),
            Spin::Skip => Duration::ZERO,
        }
    }

    /// The spin budget of a wait: `base`, or longer to cover recent waits shorter than
    /// `cap` (a `cap` not above `base` turns adaptation off).
    pub(super) fn budget(&self, base: Duration, cap: Duration) -> Duration {
        if cap <= base {
            return base;
        }
        let mut recent = [0u32; HISTORY];
        for (r, a) in recent.iter_mut().zip(&self.recent) {
            *r = a.load(Ordering::Relaxed);
        }
        recent.sort_unstable();
        let covered = recent[COVERED - 1] as u64;
        let want = Duration::from_micros(covered + (covered >> SLACK_SHIFT) + SLACK_US as u64);
        if want > cap {
            base
        } else {
            want.max(base)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_micros(50);
    const CAP: Duration = Duration::from_micros(500);

    fn advisor(waits_us: &[u64]) -> SpinAdvisor {
        let a = SpinAdvisor::default();
        for &w in waits_us {
            a.record(w * 1_000);
        }
        a
    }

    #[test]
    fn short_waits_keep_the_base_budget() {
        assert_eq!(advisor(&[2; 8]).budget(BASE, CAP), BASE);
        assert_eq!(SpinAdvisor::default().budget(BASE, CAP), BASE);
    }

    #[test]
    fn waits_after_a_pause_are_covered() {
        let b = advisor(&[80; 8]).budget(BASE, CAP);
        assert!(b >= Duration::from_micros(100) && b <= CAP, "{b:?}");
    }

    #[test]
    fn a_few_long_waits_do_not_cancel_the_spin() {
        let b = advisor(&[80, 80, 80, 80, 80, 80, 90_000, 90_000]).budget(BASE, CAP);
        assert!(b >= Duration::from_micros(100), "{b:?}");
    }

    #[test]
    fn an_idle_application_spins_only_the_base() {
        assert_eq!(advisor(&[5_000; 8]).budget(BASE, CAP), BASE);
        assert_eq!(advisor(&[480; 8]).budget(BASE, CAP), BASE);
    }

    #[test]
    fn a_wait_that_skips_the_spin_has_no_budget() {
        let a = advisor(&[80; 8]);
        assert_eq!(a.budget_of(Spin::Skip, BASE, CAP), Duration::ZERO);
        assert_eq!(a.budget_of(Spin::Adaptive, BASE, CAP), a.budget(BASE, CAP));
    }

    #[test]
    fn a_cap_at_or_below_the_base_turns_adaptation_off() {
        assert_eq!(advisor(&[80; 8]).budget(BASE, BASE), BASE);
    }
}
