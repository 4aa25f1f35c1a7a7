//! Round-trip time estimation and retransmission timeouts (RFC 6298 style).
//!
//! A microsecond link gets timeouts near the configured floor, a slow one keeps long
//! ones; the fixed delays of the original (`OMX_RESEND_DELAY_MS`,
//! `OMX_PULL_RESEND_DELAY_MS`) are the caps. Consecutive timeouts without progress
//! double the timeout (back-off) until a fresh sample or progress resets it.

use crate::types::Time;

/// Smoothed round-trip time and its variation for one path and one kind of exchange.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RttEstimator {
    /// Smoothed round-trip time (0 until the first sample).
    pub srtt: Time,
    /// Mean deviation of the samples.
    pub rttvar: Time,
    /// Samples taken (saturating).
    pub samples: u32,
    /// Consecutive timeouts since the last progress: the timeout is doubled this often.
    pub backoff: u32,
}

/// Largest back-off exponent: beyond it the cap governs anyway.
const BACKOFF_MAX: u32 = 16;

impl RttEstimator {
    /// Takes one measured round trip (never from a retransmitted exchange: Karn's rule).
    pub fn sample(&mut self, rtt: Time) {
        if self.samples == 0 {
            self.srtt = rtt;
            self.rttvar = rtt / 2;
        } else {
            let err = self.srtt.abs_diff(rtt);
            self.rttvar = (3 * self.rttvar + err) / 4;
            self.srtt = (7 * self.srtt + rtt) / 8;
        }
        self.samples = self.samples.saturating_add(1);
        self.backoff = 0;
    }

    /// The timeout: `srtt + 4 rttvar`, at least `floor`, doubled per back-off step, at
    /// most `cap`. Without a sample yet, `initial` (also clamped) stands for it.
    pub fn rto(&self, floor: Time, initial: Time, cap: Time) -> Time {
        let base = if self.samples == 0 {
            initial
        } else {
            self.srtt.saturating_add(self.rttvar.saturating_mul(4))
        };
        let floor = floor.min(cap);
        base.max(floor)
            .saturating_mul(1 << self.backoff.min(BACKOFF_MAX))
            .min(cap)
    }

    /// A timeout fired without progress: the next one waits twice as long.
    pub fn back_off(&mut self) {
        self.backoff = (self.backoff + 1).min(BACKOFF_MAX);
    }

    /// Progress (an ack that advanced, a frame that arrived): back-off ends.
    pub fn progress(&mut self) {
        self.backoff = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const US: Time = 1_000;
    const MS: Time = 1_000_000;

    #[test]
    fn first_sample_sets_srtt_and_half_variation() {
        let mut r = RttEstimator::default();
        assert_eq!(r.rto(MS, 100 * MS, 500 * MS), 100 * MS);
        r.sample(40 * US);
        assert_eq!((r.srtt, r.rttvar), (40 * US, 20 * US));
        // 40 + 4 * 20 = 120 us, below the 1 ms floor.
        assert_eq!(r.rto(MS, 100 * MS, 500 * MS), MS);
        assert_eq!(r.rto(10 * US, 100 * MS, 500 * MS), 120 * US);
    }

    #[test]
    fn smoothing_follows_rfc6298_gains() {
        let mut r = RttEstimator::default();
        r.sample(800);
        r.sample(1600);
        // rttvar = 3/4 * 400 + 1/4 * 800 = 500; srtt = 7/8 * 800 + 1/8 * 1600 = 900.
        assert_eq!((r.srtt, r.rttvar), (900, 500));
    }

    #[test]
    fn slow_links_keep_long_timeouts_within_the_cap() {
        let mut r = RttEstimator::default();
        r.sample(200 * MS);
        assert_eq!(r.rto(MS, MS, 500 * MS), 500 * MS);
    }

    #[test]
    fn back_off_doubles_until_the_cap_and_progress_resets_it() {
        let mut r = RttEstimator::default();
        r.sample(100 * US);
        let base = r.rto(0, 0, 500 * MS);
        r.back_off();
        assert_eq!(r.rto(0, 0, 500 * MS), 2 * base);
        r.back_off();
        assert_eq!(r.rto(0, 0, 500 * MS), 4 * base);
        for _ in 0..40 {
            r.back_off();
        }
        assert_eq!(r.rto(0, 0, 500 * MS), 500 * MS);
        r.progress();
        assert_eq!(r.rto(0, 0, 500 * MS), base);
    }
}
