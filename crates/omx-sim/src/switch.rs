//! A store-and-forward Ethernet switch joining the simulated hosts (`World::switch`).
//! Each host hangs off one port; a frame crosses the host's link, waits in the output
//! queue of the destination's port, leaves at that port's bandwidth and crosses the
//! port's link. An output queue holds a finite number of bytes: a frame that finds it
//! full is dropped, so congestion losses come in bursts on one port, as on a real
//! switch, not at random (what the loss-recovery tests need besides `LinkConfig::burst`).

use omx_proto::Time;

/// One port and the link from it to its host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortConfig {
    /// Bytes per second the port sends at; 0 for unlimited (no queue forms).
    pub bandwidth: u64,
    /// Propagation and switching latency from the port to its host.
    pub latency: Time,
    /// Bytes the output queue holds; a frame that would overflow it is dropped.
    pub queue_bytes: usize,
}

impl Default for PortConfig {
    /// 10 Gb/s, 1 µs, 512 KiB per port: a shallow-buffered data-centre switch.
    fn default() -> Self {
        PortConfig {
            bandwidth: 1_250_000_000,
            latency: 1_000,
            queue_bytes: 512 << 10,
        }
    }
}

/// What one port saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    pub forwarded: u64,
    pub dropped: u64,
    /// Runs of consecutive drops (a burst ends when a frame gets through).
    pub drop_bursts: u64,
    pub peak_queue_bytes: usize,
}

#[derive(Clone, Debug)]
struct Port {
    cfg: PortConfig,
    /// When the output queue will have drained (the last admitted frame has left).
    free_at: Time,
    dropping: bool,
    stats: PortStats,
}

/// The switch: one port per host, indexed like `World::hosts`.
#[derive(Clone, Debug)]
pub struct Switch {
    ports: Vec<Port>,
}

impl Switch {
    /// `ports` ports configured alike.
    pub fn new(ports: usize, cfg: PortConfig) -> Self {
        let port = Port {
            cfg,
            free_at: 0,
            dropping: false,
            stats: PortStats::default(),
        };
        Switch {
            ports: vec![port; ports],
        }
    }

    /// The configuration of one port, to give a link its own latency or bandwidth.
    pub fn port_config_mut(&mut self, port: usize) -> &mut PortConfig {
        &mut self.ports[port].cfg
    }

    pub fn port_stats(&self, port: usize) -> PortStats {
        self.ports[port].stats
    }

    /// Every port's counters summed, with the largest queue seen on any port.
    pub fn total(&self) -> PortStats {
        self.ports
            .iter()
            .fold(PortStats::default(), |t, p| PortStats {
                forwarded: t.forwarded + p.stats.forwarded,
                dropped: t.dropped + p.stats.dropped,
                drop_bursts: t.drop_bursts + p.stats.drop_bursts,
                peak_queue_bytes: t.peak_queue_bytes.max(p.stats.peak_queue_bytes),
            })
    }

    /// A frame of `len` bytes reaching the switch at `at` for the host on `port`: when
    /// it reaches that host, or `None` when the port's queue is full and drops it.
    /// Frames are queued in the order they are offered, which is arrival order as long
    /// as the hosts' links have equal latencies (a frame offered late but arriving
    /// earlier queues behind the ones offered before it).
    pub fn forward(&mut self, port: usize, at: Time, len: usize) -> Option<Time> {
        let p = &mut self.ports[port];
        let bw = p.cfg.bandwidth;
        if bw == 0 {
            p.stats.forwarded += 1;
            return Some(at + p.cfg.latency);
        }
        let backlog = (p.free_at.saturating_sub(at) as u128 * bw as u128 / 1_000_000_000) as usize;
        if backlog + len > p.cfg.queue_bytes {
            p.stats.dropped += 1;
            if !p.dropping {
                p.dropping = true;
                p.stats.drop_bursts += 1;
            }
            return None;
        }
        p.dropping = false;
        p.stats.forwarded += 1;
        p.stats.peak_queue_bytes = p.stats.peak_queue_bytes.max(backlog + len);
        let wire_time = (len as u64 * 1_000_000_000).div_ceil(bw);
        p.free_at = p.free_at.max(at) + wire_time;
        Some(p.free_at + p.cfg.latency)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(bandwidth: u64, queue_bytes: usize) -> PortConfig {
        PortConfig {
            bandwidth,
            latency: 100,
            queue_bytes,
        }
    }

    #[test]
    fn frames_leave_at_the_port_rate_in_order() {
        // 1 byte per ns: a 1000-byte frame takes 1 µs on the wire.
        let mut s = Switch::new(2, port(1_000_000_000, 10_000));
        assert_eq!(s.forward(1, 0, 1000), Some(1000 + 100));
        assert_eq!(s.forward(1, 0, 1000), Some(2000 + 100));
        // An idle port sends at once.
        assert_eq!(s.forward(0, 5000, 500), Some(5500 + 100));
        assert_eq!(s.forward(1, 10_000, 1000), Some(11_000 + 100));
        assert_eq!(s.port_stats(1).forwarded, 3);
        assert_eq!(s.port_stats(1).peak_queue_bytes, 2000);
    }

    #[test]
    fn a_full_queue_drops_a_burst_then_drains() {
        let mut s = Switch::new(1, port(1_000_000_000, 3000));
        let got: Vec<_> = (0..6).map(|_| s.forward(0, 0, 1000).is_some()).collect();
        assert_eq!(got, [true, true, true, false, false, false]);
        // Once the queue has drained by one frame, one more fits.
        assert!(s.forward(0, 1000, 1000).is_some());
        assert!(s.forward(0, 1000, 1000).is_none());
        let st = s.port_stats(0);
        assert_eq!((st.forwarded, st.dropped, st.drop_bursts), (4, 4, 2));
        assert_eq!(s.total().dropped, 4);
    }

    #[test]
    fn unlimited_port_only_adds_latency() {
        let mut s = Switch::new(1, port(0, 0));
        assert_eq!(s.forward(0, 7, 9000), Some(107));
        assert_eq!(s.port_stats(0).dropped, 0);
    }
}
