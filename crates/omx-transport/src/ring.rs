//! Memory-mapped RX ring (`PACKET_RX_RING`, TPACKET_V2).
//!
//! Why V2 and not V3: a V3 ring hands frames to user space one *block* at a
//! time, when the block is full or when its retire timer (millisecond
//! granularity) fires. A lone ping therefore waits up to the timer period,
//! which is fatal for a message-passing stack whose small-message latency is
//! a few microseconds. V2 publishes every frame as soon as it is copied (one
//! status word per slot), so the receive path is a load of that word, a
//! borrow of the slot and a store to hand it back: no syscall and no copy.
//! The price is fixed-size slots, sized here from the interface MTU.

use bytes::Bytes;
use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::sys::{self, Mmap};

const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1 << 0;
const TP_STATUS_COPY: u32 = 1 << 1;

// struct tpacket2_hdr field offsets, then the sockaddr_ll the kernel stores
// at TPACKET_ALIGN(sizeof(tpacket2_hdr)) = 32.
const OFF_LEN: usize = 4;
const OFF_SNAPLEN: usize = 8;
const OFF_MAC: usize = 12;
const OFF_PKTTYPE: usize = 32 + 10;

/// Bytes reserved in front of the frame in each slot. The kernel puts the
/// frame at TPACKET_ALIGN(52 + 16) - 14 = 66 for Ethernet; 96 leaves slack.
const SLOT_HEADROOM: usize = 96;
/// Slack for a VLAN tag left in the frame by a device without tag offload.
const VLAN_SLACK: usize = 4;
/// Never build a ring with fewer slots than this, whatever the byte budget.
const MIN_FRAMES: usize = 64;

/// Geometry of a V2 ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingLayout {
    pub block_size: usize,
    pub block_nr: usize,
    pub frame_size: usize,
}

impl RingLayout {
    /// Slots large enough for a whole frame at `mtu`, packed into power-of-two
    /// blocks (the kernel allocates each block as 2^n pages, so other sizes
    /// waste kernel memory) chosen to waste little of each block, with about
    /// `ring_bytes` in total.
    pub fn for_mtu(mtu: u32, ring_bytes: usize) -> RingLayout {
        let page = sys::page_size();
        let frame_size = (SLOT_HEADROOM + crate::ETH_HEADER_LEN + VLAN_SLACK + mtu as usize)
            .next_multiple_of(16);
        let smallest = frame_size.max(page).next_power_of_two();
        let waste = |b: usize| (b % frame_size) as f64 / b as f64;
        // Up to 8x the smallest block; first one wasting <= 1/8 wins, else least waste.
        let candidates = (0..4).map(|s| smallest << s);
        let block_size = candidates
            .clone()
            .find(|&b| waste(b) <= 0.125)
            .unwrap_or_else(|| {
                candidates
                    .min_by(|&a, &b| waste(a).total_cmp(&waste(b)))
                    .expect("non-empty")
            });
        let per_block = block_size / frame_size;
        let block_nr = (ring_bytes / block_size).max(MIN_FRAMES.div_ceil(per_block));
        RingLayout {
            block_size,
            block_nr,
            frame_size,
        }
    }

    pub fn frames_per_block(&self) -> usize {
        self.block_size / self.frame_size
    }
    pub fn frame_nr(&self) -> usize {
        self.frames_per_block() * self.block_nr
    }
    pub fn total_bytes(&self) -> usize {
        self.block_size * self.block_nr
    }
    /// Largest frame a slot holds without truncation.
    pub fn max_frame(&self) -> usize {
        self.frame_size - SLOT_HEADROOM
    }
}

/// Counters updated by [`RxRing::drain`] (shared shape with the recvmmsg path).
#[derive(Default, Debug, Clone, Copy)]
pub struct RxCounters {
    pub received: u64,
    pub truncated: u64,
    pub skipped: u64,
}

/// What to do with a received frame, by `sll_pkttype`.
#[inline]
pub fn wanted(pkttype: u8, accept_other_host: bool) -> bool {
    // Our own transmissions (PACKET_OUTGOING) are echoed to packet sockets on
    // the sending host; frames for another MAC (PACKET_OTHERHOST) only reach
    // us through bridge flooding or promiscuous mode and are not ours.
    pkttype != sys::PACKET_OUTGOING && (accept_other_host || pkttype != sys::PACKET_OTHERHOST)
}

/// The mapping and, per slot, whether a frame in it is still held (lent out as
/// [`Bytes`] past the drain: a receive copy not done yet). Shared with the holders.
struct Slots {
    map: Mmap,
    held: Box<[AtomicBool]>,
}

/// A mapped V2 RX ring and the index of the next slot to look at.
pub struct RxRing {
    slots: Arc<Slots>,
    layout: RingLayout,
    head: usize,
    /// Byte offset of slot `head`, kept up to date as it advances: an idle poll
    /// then costs one load, not the divisions of `slot_offset`.
    head_off: usize,
    /// Slots held, oldest first (entries already given back are dropped lazily).
    held: VecDeque<usize>,
}

/// A frame the receive path is shown: borrowed for the call, and when it lies in a
/// ring slot, possibly held past it with [`RxFrame::hold`].
pub struct RxFrame<'a> {
    data: &'a [u8],
    slot: Option<SlotLease<'a>>,
}

struct SlotLease<'a> {
    slots: &'a Arc<Slots>,
    index: usize,
    status_off: usize,
    data_off: usize,
    /// Holding is allowed (the ring stays far from stalling).
    may_hold: bool,
    held: &'a Cell<Option<Bytes>>,
}

impl<'a> RxFrame<'a> {
    /// A frame that is not in a ring slot (it cannot be held).
    pub fn borrowed(data: &'a [u8]) -> RxFrame<'a> {
        RxFrame { data, slot: None }
    }

    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Whether the frame lies in a ring slot.
    pub fn in_slot(&self) -> bool {
        self.slot.is_some()
    }

    /// The frame as bytes that keep its slot from the kernel until the last of them
    /// is dropped (so a copy out of it can run later, elsewhere). `None` when the
    /// frame is not in a slot, or when the ring has too many slots held already:
    /// holding more could stall it (the kernel drops frames at a held slot).
    pub fn hold(&mut self) -> Option<Bytes> {
        let l = self.slot.as_ref().filter(|l| l.may_hold)?;
        if let Some(b) = l.held.take() {
            l.held.set(Some(b.clone()));
            return Some(b);
        }
        l.slots.held[l.index].store(true, Ordering::Release);
        let b = Bytes::from_owner(HeldSlot {
            slots: l.slots.clone(),
            index: l.index,
            status_off: l.status_off,
            data_off: l.data_off,
            len: self.data.len(),
        });
        l.held.set(Some(b.clone()));
        Some(b)
    }
}

/// Owner of a held frame's bytes: gives the slot back to the kernel when dropped.
struct HeldSlot {
    slots: Arc<Slots>,
    index: usize,
    status_off: usize,
    data_off: usize,
    len: usize,
}

impl AsRef<[u8]> for HeldSlot {
    fn as_ref(&self) -> &[u8] {
        self.slots.map.slice(self.data_off, self.len)
    }
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        // The kernel's first, then the flag: the drain must never see the old frame's
        // status with the flag already cleared (it would take the frame again).
        self.slots
            .map
            .store_release(self.status_off, TP_STATUS_KERNEL);
        self.slots.held[self.index].store(false, Ordering::Release);
    }
}

impl RxRing {
    /// Sets up and maps the ring on `fd` (must happen before `bind`, so no
    /// frame goes to the ordinary receive queue in the meantime).
    pub fn setup(fd: RawFd, layout: RingLayout) -> io::Result<RxRing> {
        sys::setup_rx_ring(
            fd,
            layout.block_size as u32,
            layout.block_nr as u32,
            layout.frame_size as u32,
        )?;
        let map = Mmap::map_ring(fd, layout.total_bytes())?;
        let held = (0..layout.frame_nr())
            .map(|_| AtomicBool::new(false))
            .collect();
        Ok(RxRing {
            slots: Arc::new(Slots { map, held }),
            layout,
            head: 0,
            head_off: 0,
            held: VecDeque::new(),
        })
    }

    pub fn layout(&self) -> RingLayout {
        self.layout
    }

    fn slot_offset(&self, i: usize) -> usize {
        let fpb = self.layout.frames_per_block();
        (i / fpb) * self.layout.block_size + (i % fpb) * self.layout.frame_size
    }

    /// Whether the next slot holds a frame (cheap: one load, no syscall).
    #[inline]
    pub fn ready(&self) -> bool {
        self.slots.map.load_acquire(self.head_off) & TP_STATUS_USER != 0
            && !self.slots.held[self.head].load(Ordering::Acquire)
    }

    /// Slots still held (a copy out of them not done yet).
    pub fn held(&mut self) -> usize {
        self.forget_returned();
        self.held.len()
    }

    fn forget_returned(&mut self) {
        while let Some(&i) = self.held.front() {
            if self.slots.held[i].load(Ordering::Acquire) {
                break;
            }
            self.held.pop_front();
        }
    }

    /// Whether the slot at `head` may be held: the oldest held slot is less than half
    /// the ring behind, so the kernel, which fills slots in order and stops at a held
    /// one, keeps at least half the ring (less the frames not yet drained) free.
    fn may_hold(&mut self) -> bool {
        self.forget_returned();
        let n = self.layout.frame_nr();
        let limit = n / 2;
        match self.held.front() {
            None => true,
            Some(&oldest) => self.held.len() < limit && (self.head + n - oldest) % n < limit,
        }
    }

    /// Hands up to `max` frames to `f`, straight from the ring, returning each
    /// slot to the kernel after `f` returns unless `f` held its frame
    /// ([`RxFrame::hold`]; the slot returns when the last hold is dropped).
    /// Truncated and unwanted frames are released without being shown and do not
    /// count toward `max`.
    #[inline]
    pub fn drain(
        &mut self,
        max: usize,
        accept_other_host: bool,
        c: &mut RxCounters,
        mut f: impl FnMut(RxFrame<'_>),
    ) -> usize {
        let mut n = 0;
        while n < max {
            let off = self.head_off;
            let status = self.slots.map.load_acquire(off);
            if status & TP_STATUS_USER == 0 {
                break;
            }
            if self.slots.held[self.head].load(Ordering::Acquire) {
                // Still held from the ring's last lap: the kernel stopped here too.
                break;
            }
            let map = &self.slots.map;
            let len = u32::from_ne_bytes(map.read(off + OFF_LEN)) as usize;
            let snap = u32::from_ne_bytes(map.read(off + OFF_SNAPLEN)) as usize;
            let mac = u16::from_ne_bytes(map.read(off + OFF_MAC)) as usize;
            let [pkttype] = map.read(off + OFF_PKTTYPE);
            let held = Cell::new(None);
            if snap < len || status & TP_STATUS_COPY != 0 {
                c.truncated += 1;
            } else if !wanted(pkttype, accept_other_host) {
                c.skipped += 1;
            } else {
                let may_hold = self.may_hold();
                let slots = &self.slots;
                f(RxFrame {
                    data: slots.map.slice(off + mac, snap),
                    slot: Some(SlotLease {
                        slots,
                        index: self.head,
                        status_off: off,
                        data_off: off + mac,
                        may_hold,
                        held: &held,
                    }),
                });
                n += 1;
            }
            if held.take().is_some() {
                // Its holders give it back (possibly already did, when dropped in `f`).
                self.held.push_back(self.head);
            } else {
                self.slots.map.store_release(off, TP_STATUS_KERNEL);
            }
            self.head += 1;
            if self.head == self.layout.frame_nr() {
                self.head = 0;
            }
            self.head_off = self.slot_offset(self.head);
        }
        c.received += n as u64;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_fit_and_pack() {
        for mtu in [1500u32, 9000, 16110, 65535, 65536] {
            let l = RingLayout::for_mtu(mtu, 8 << 20);
            assert!(l.max_frame() >= mtu as usize + 14, "{l:?}");
            assert_eq!(l.frame_size % 16, 0);
            assert!(l.block_size.is_power_of_two() && l.block_size % sys::page_size() == 0);
            assert!(l.frames_per_block() >= 1);
            assert!(l.frame_nr() >= MIN_FRAMES, "{l:?}");
            let waste = (l.block_size % l.frame_size) as f64 / l.block_size as f64;
            assert!(waste <= 0.25, "{mtu}: {l:?} wastes {waste}");
        }
        let l = RingLayout::for_mtu(9000, 8 << 20);
        assert_eq!(l.total_bytes(), 8 << 20);
        assert!(l.frame_nr() >= 800, "{l:?}");
    }
}
