//! Fault injection on the real packet path (`OMX_FAULTS`): drops, duplicates, reorders
//! and corrupts frames as they are received, and drops frames about to be sent, so the
//! protocol's recovery runs over real sockets and real processes, not only in the
//! simulator. Seeded, so a failing run can be repeated.
//!
//! Format: `loss:P,dup:P,reorder:P,corrupt:P,seed:N` (any subset, P in [0, 1]).
//! `loss` applies on both paths (half the probability each, so a frame crossing one
//! link is lost with about `P`), the others on reception. A reordered frame is held
//! back and delivered after the next batch of received frames. A corrupted frame gets
//! one bit flipped past the Ethernet header.

use crate::ring::RxFrame;

/// What `OMX_FAULTS` asks for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultConfig {
    pub loss: f64,
    pub dup: f64,
    pub reorder: f64,
    pub corrupt: f64,
    pub seed: u64,
}

impl FaultConfig {
    pub fn parse(s: &str) -> Result<FaultConfig, String> {
        let mut c = FaultConfig {
            seed: 1,
            ..FaultConfig::default()
        };
        for item in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            let (k, v) = item
                .split_once(':')
                .ok_or_else(|| format!("`{item}`: expected name:value"))?;
            if k == "seed" {
                c.seed = v.parse().map_err(|_| format!("`{item}`: bad seed"))?;
                continue;
            }
            let p: f64 = v
                .parse()
                .map_err(|_| format!("`{item}`: bad probability"))?;
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("`{item}`: probability outside [0, 1]"));
            }
            match k {
                "loss" => c.loss = p,
                "dup" => c.dup = p,
                "reorder" => c.reorder = p,
                "corrupt" => c.corrupt = p,
                _ => {
                    return Err(format!(
                        "`{k}`: unknown fault (loss, dup, reorder, corrupt, seed)"
                    ))
                }
            }
        }
        Ok(c)
    }

    pub fn is_active(&self) -> bool {
        self.loss > 0.0 || self.dup > 0.0 || self.reorder > 0.0 || self.corrupt > 0.0
    }
}

/// Frames affected so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    pub dropped_rx: u64,
    pub dropped_tx: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
}

pub struct FaultInjector {
    cfg: FaultConfig,
    state: u64,
    held: Vec<Vec<u8>>,
    pub stats: FaultStats,
}

/// Frames held back for reordering at most (beyond, they are released at once).
const HELD_MAX: usize = 64;

impl FaultInjector {
    pub fn new(cfg: FaultConfig) -> FaultInjector {
        // SplitMix-style scrambling so that small seeds give unrelated streams.
        let state = cfg.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        FaultInjector {
            cfg,
            state,
            held: Vec::new(),
            stats: FaultStats::default(),
        }
    }

    /// Uniform in [0, 1) (xorshift64*).
    fn next(&mut self) -> f64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        let x = self.state.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.next() < p
    }

    /// A received frame: handed to `out` zero, one or two times (possibly corrupted),
    /// or held back until [`FaultInjector::release`]. A frame delivered unchanged
    /// and once is the one received (a ring slot stays a ring slot); the others are
    /// copies.
    pub fn on_receive(&mut self, frame: RxFrame<'_>, out: &mut dyn FnMut(RxFrame<'_>)) {
        if self.chance(self.cfg.loss / 2.0) {
            self.stats.dropped_rx += 1;
            return;
        }
        let mut copy = None;
        if frame.data().len() > 14 && self.chance(self.cfg.corrupt) {
            let mut f = frame.data().to_vec();
            let span = f.len() - 14;
            let at = 14 + (self.next() * span as f64) as usize % span;
            let bit = (self.next() * 8.0) as u32 % 8;
            f[at] ^= 1 << bit;
            self.stats.corrupted += 1;
            copy = Some(f);
        }
        if self.chance(self.cfg.dup) {
            self.stats.duplicated += 1;
            out(RxFrame::borrowed(copy.as_deref().unwrap_or(frame.data())));
        }
        if self.held.len() < HELD_MAX && self.chance(self.cfg.reorder) {
            self.stats.reordered += 1;
            self.held
                .push(copy.unwrap_or_else(|| frame.data().to_vec()));
            return;
        }
        match copy {
            Some(f) => out(RxFrame::borrowed(&f)),
            None => out(frame),
        }
    }

    /// Delivers the frames held back (after the batch that followed them).
    pub fn release(&mut self, out: &mut dyn FnMut(RxFrame<'_>)) {
        for f in std::mem::take(&mut self.held) {
            out(RxFrame::borrowed(&f));
        }
    }

    /// Whether to drop a frame about to be sent.
    pub fn drop_send(&mut self) -> bool {
        let d = self.chance(self.cfg.loss / 2.0);
        if d {
            self.stats.dropped_tx += 1;
        }
        d
    }

    pub fn has_held(&self) -> bool {
        !self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_fault_and_rejects_nonsense() {
        let c = FaultConfig::parse("loss:0.05, dup:0.02,reorder:0.1,corrupt:0.001,seed:9").unwrap();
        assert_eq!(
            c,
            FaultConfig {
                loss: 0.05,
                dup: 0.02,
                reorder: 0.1,
                corrupt: 0.001,
                seed: 9
            }
        );
        assert!(c.is_active());
        assert!(!FaultConfig::parse("").unwrap().is_active());
        for bad in [
            "loss",
            "loss:2",
            "loss:-1",
            "jitter:0.1",
            "seed:x",
            "dup:abc",
        ] {
            assert!(FaultConfig::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rates_match_the_configuration_and_runs_repeat() {
        let cfg = FaultConfig::parse("loss:0.2,dup:0.1,reorder:0.1,corrupt:0.05,seed:3").unwrap();
        let run = || {
            let mut inj = FaultInjector::new(cfg.clone());
            let mut got: Vec<Vec<u8>> = Vec::new();
            for i in 0..20_000u32 {
                let f = [vec![0u8; 14], i.to_be_bytes().to_vec(), vec![7u8; 50]].concat();
                inj.on_receive(RxFrame::borrowed(&f), &mut |g| got.push(g.data().to_vec()));
                if i % 8 == 7 {
                    inj.release(&mut |g| got.push(g.data().to_vec()));
                }
                let _ = inj.drop_send();
            }
            inj.release(&mut |g| got.push(g.data().to_vec()));
            (inj.stats, got)
        };
        let (s, got) = run();
        let n = 20_000.0;
        let near = |x: u64, p: f64| ((x as f64 / n) - p).abs() < 0.02;
        assert!(near(s.dropped_rx, 0.1) && near(s.dropped_tx, 0.1), "{s:?}");
        assert!(near(s.corrupted, 0.05 * 0.9), "{s:?}");
        assert!(s.duplicated > 0 && s.reordered > 0);
        assert_eq!(
            got.len() as u64,
            20_000 - s.dropped_rx + s.duplicated,
            "every frame not dropped comes out, duplicates twice"
        );
        assert!(
            got.windows(2).any(|w| w[0][14..18] > w[1][14..18]),
            "some frames overtaken"
        );
        assert_eq!(run().0, s, "same seed, same faults");
    }
}
