//! The engines' clock: `CLOCK_MONOTONIC` in nanoseconds since the runtime started.
//!
//! Read one to three times per small message (posts and progress passes), and
//! `clock_gettime` costs 20-30 ns on the virtual machines measured here against 10-13 ns
//! for the CPU's time-stamp counter: 5-8% of a streamed 8 B message. So where the
//! kernel itself keeps `CLOCK_MONOTONIC` on the time-stamp counter (its clocksource is
//! `tsc`: the counter is invariant and synchronised across CPUs, or the kernel would
//! have left it), a read takes the counter and scales it from an anchor, a
//! (counter, `CLOCK_MONOTONIC`) pair taken by the kernel's clock at most
//! [`ANCHOR_SPAN_NS`] before. The scale is measured against the runtime's first
//! anchor once [`CALIBRATION_NS`] have passed (until then every read is the kernel's):
//! at that baseline two reads a few tens of ns apart give it to 2e-6, so a value is
//! within a few ns of the kernel's. A counter that went backwards or jumped (a
//! migrated virtual machine) fails the span check and takes a new anchor.
//! `OMX_CLOCK=kernel` turns it off.

use std::sync::atomic::{fence, AtomicU64, Ordering};

/// A read scaled from an anchor older than this takes a new anchor.
const ANCHOR_SPAN_NS: u64 = 1_000_000;
/// Baseline of the scale: reads stay the kernel's until this long after the start.
const CALIBRATION_NS: u64 = 20_000_000;

pub(crate) fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A clock's resolution in ns (4 ms for the coarse clock at HZ=250), at least 1 ms
/// when it cannot be read (the safe side: more precise reads, never late timers).
fn clock_res_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_getres writes one timespec.
    let rc = unsafe { libc::clock_getres(clock, &mut ts) };
    if rc != 0 {
        return 1_000_000;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub struct Clock {
    start_ns: u64,
    /// How late `CLOCK_MONOTONIC_COARSE` may be.
    pub coarse_lag: u64,
    tsc: Option<TscScale>,
}

impl Clock {
    /// `counter`: scale the time-stamp counter where the kernel's clocksource is it.
    pub fn new(counter: bool) -> Clock {
        let start_ns = clock_ns(libc::CLOCK_MONOTONIC);
        Clock {
            start_ns,
            coarse_lag: clock_res_ns(libc::CLOCK_MONOTONIC_COARSE),
            tsc: (counter && TscScale::allowed()).then(TscScale::new),
        }
    }

    /// Whether reads scale the time-stamp counter (after the calibration).
    pub fn uses_counter(&self) -> bool {
        self.tsc.is_some()
    }

    /// Monotonic nanoseconds since the start.
    #[inline]
    pub fn now(&self) -> u64 {
        let ns = match &self.tsc {
            Some(t) => t.now(),
            None => clock_ns(libc::CLOCK_MONOTONIC),
        };
        ns.saturating_sub(self.start_ns)
    }

    /// The same clock read coarsely (a few ns, up to `coarse_lag` late).
    #[inline]
    pub fn coarse_now(&self) -> u64 {
        clock_ns(libc::CLOCK_MONOTONIC_COARSE).saturating_sub(self.start_ns)
    }
}

/// The counter's scale and the latest anchor, shared by every thread of the process
/// under a sequence lock (a reader that meets a write in progress reads the kernel's
/// clock instead of retrying).
struct TscScale {
    base_tsc: u64,
    base_ns: u64,
    /// Even when stable; odd while an anchor is written.
    seq: AtomicU64,
    anchor_tsc: AtomicU64,
    anchor_ns: AtomicU64,
    /// Nanoseconds per counter tick, 32.32 fixed point; 0 until calibrated.
    mult: AtomicU64,
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn counter() -> u64 {
    // SAFETY: RDTSC has no preconditions on x86-64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn counter() -> u64 {
    0
}

/// Counter ticks a `clock_gettime` may take between the two counter reads around it
/// (about a hundred on the machines measured; tens of thousands mean a preemption).
const PAIR_TICKS_MAX: u64 = 20_000;

/// The kernel's clock and the counter at the same moment (the middle of two counter
/// reads around the clock's), and whether the reads were close together.
fn paired_read() -> (u64, u64, bool) {
    let before = counter();
    let ns = clock_ns(libc::CLOCK_MONOTONIC);
    let after = counter();
    let gap = after.wrapping_sub(before);
    (before.wrapping_add(gap / 2), ns, gap <= PAIR_TICKS_MAX)
}

impl TscScale {
    fn allowed() -> bool {
        cfg!(target_arch = "x86_64")
            && std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .is_ok_and(|s| s.trim() == "tsc")
    }

    fn new() -> TscScale {
        // A pair read without a preemption between its halves (a few tries).
        let (mut base_tsc, mut base_ns) = (0, 0);
        for _ in 0..8 {
            let (tsc, ns, tight) = paired_read();
            (base_tsc, base_ns) = (tsc, ns);
            if tight {
                break;
            }
        }
        TscScale {
            base_tsc,
            base_ns,
            seq: AtomicU64::new(0),
            anchor_tsc: AtomicU64::new(base_tsc),
            anchor_ns: AtomicU64::new(base_ns),
            mult: AtomicU64::new(0),
        }
    }

    #[inline]
    fn now(&self) -> u64 {
        let s1 = self.seq.load(Ordering::Acquire);
        let tsc = self.anchor_tsc.load(Ordering::Relaxed);
        let ns = self.anchor_ns.load(Ordering::Relaxed);
        let mult = self.mult.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        let s2 = self.seq.load(Ordering::Relaxed);
        let since = ((counter().wrapping_sub(tsc) as u128 * mult as u128) >> 32) as u64;
        if s1 == s2 && s1 & 1 == 0 && mult != 0 && since < ANCHOR_SPAN_NS {
            return ns + since;
        }
        self.reanchor()
    }

    /// Reads the kernel's clock and publishes it as the new anchor (unless another
    /// thread is publishing one), with the scale measured from the base.
    #[cold]
    fn reanchor(&self) -> u64 {
        let (tsc, ns, tight) = paired_read();
        let (span_ns, span_tsc) = (
            ns.saturating_sub(self.base_ns),
            tsc.wrapping_sub(self.base_tsc),
        );
        // Too early to scale, a pair split by a preemption, or a counter that went
        // backwards: this read is the kernel's, and the anchor stays.
        if !tight || span_ns < CALIBRATION_NS || span_tsc == 0 || span_tsc > u64::MAX / 2 {
            return ns;
        }
        let mult = ((span_ns as u128) << 32) / span_tsc as u128;
        let s = self.seq.load(Ordering::Relaxed);
        if s & 1 == 0
            && mult <= u64::MAX as u128
            && self
                .seq
                .compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            fence(Ordering::Release);
            self.anchor_tsc.store(tsc, Ordering::Relaxed);
            self.anchor_ns.store(ns, Ordering::Relaxed);
            self.mult.store(mult as u64, Ordering::Relaxed);
            self.seq.store(s + 2, Ordering::Release);
        }
        ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scaled reads stay within a few microseconds of the kernel's clock and never
    /// behind an earlier read of the same thread by more than the scale's error.
    #[test]
    fn scaled_reads_follow_the_kernel_clock() {
        let clock = Clock::new(true);
        if !clock.uses_counter() {
            eprintln!("clocksource is not tsc here: kernel reads only");
        }
        // Past the calibration, then across several anchor spans.
        let until = clock_ns(libc::CLOCK_MONOTONIC) + CALIBRATION_NS + 5 * ANCHOR_SPAN_NS;
        let mut last = 0u64;
        let mut reads = 0u64;
        while clock_ns(libc::CLOCK_MONOTONIC) < until {
            let before = clock_ns(libc::CLOCK_MONOTONIC) - clock.start_ns;
            let ours = clock.now();
            let after = clock_ns(libc::CLOCK_MONOTONIC) - clock.start_ns;
            // Within 2 us of the kernel's reads around it (the scale's error over one
            // span is a few ns; the slack covers a preemption between the reads).
            assert!(
                ours + 2_000 >= before && ours <= after + 2_000,
                "{before} <= {ours} <= {after}"
            );
            assert!(ours + 1_000 >= last, "went back: {last} -> {ours}");
            last = ours;
            reads += 1;
        }
        assert!(reads > 0);
        if let Some(t) = &clock.tsc {
            assert_ne!(t.mult.load(Ordering::Relaxed), 0, "never calibrated");
        }
    }

    #[test]
    fn kernel_clock_when_asked() {
        let clock = Clock::new(false);
        assert!(!clock.uses_counter());
        let a = clock.now();
        let b = clock.now();
        assert!(b >= a);
    }
}
