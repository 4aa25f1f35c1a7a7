//! The inbox file's layout (see the module documentation of [`super`]): header and
//! slot control-block offsets, state values, record header words, and the geometry
//! derived from (slots, ring bytes).

use super::{max_record_for_ring, MAX_RING_BYTES, MAX_SLOTS, MIN_RING_BYTES};

pub(super) const MAGIC: u64 = u64::from_le_bytes(*b"OMXSHMIB");
const PAGE: usize = 4096;
/// Length field of a padding record (up to the end of the ring).
pub(super) const PAD_LEN: u32 = u32::MAX;
/// Mixed into every record tag, so that a zero-filled word (a fresh file) is
/// not a valid header at the start of a ring.
const TAG_SALT: u32 = 0x4f4d_5852;

pub(super) const H_MAGIC: usize = 0;
pub(super) const H_VERSION: usize = 8;
pub(super) const H_STATE: usize = 12;
pub(super) const H_PID: usize = 16;
pub(super) const H_SESSION: usize = 20;
pub(super) const H_KEY: usize = 24;
pub(super) const H_ENDPOINT: usize = 28;
pub(super) const H_NIC: usize = 32;
pub(super) const H_SLOTS: usize = 40;
pub(super) const H_RING: usize = 48;
pub(super) const H_SIZE: usize = 56;
pub(super) const H_ACTIVE: usize = 128;
pub(super) const H_SLEEP: usize = 256;
pub(super) const HEADER_BYTES: usize = PAGE;

pub(super) const HDR_INIT: u32 = 0;
pub(super) const HDR_READY: u32 = 1;
pub(super) const HDR_CLOSED: u32 = 2;

pub(super) const AWAKE: u32 = 0;
pub(super) const ASLEEP: u32 = 1;
pub(super) const RUNG: u32 = 2;

const CTRL_STRIDE: usize = 256;
pub(super) const C_STATE: usize = 0;
pub(super) const C_NIC: usize = 8;
pub(super) const C_SESSION: usize = 16;
pub(super) const C_PID: usize = 20;
pub(super) const C_ENDPOINT: usize = 24;
pub(super) const C_HEAD: usize = 128;

pub(super) const SLOT_FREE: u32 = 0;
pub(super) const SLOT_CLAIMING: u32 = 1;
pub(super) const SLOT_ACTIVE: u32 = 2;
pub(super) const SLOT_CLOSED: u32 = 3;
pub(super) const SLOT_BROKEN: u32 = 4;

pub(super) fn pack(state: u32, pid: u32) -> u64 {
    (u64::from(pid) << 32) | u64::from(state)
}

pub(super) fn unpack(word: u64) -> (u32, u32) {
    (word as u32, (word >> 32) as u32)
}

/// Tag of the record header at absolute ring position `pos`.
#[inline(always)]
pub(super) fn tag(pos: u64) -> u32 {
    ((pos >> 3) as u32) ^ TAG_SALT
}

/// Header word of a record of length field `len` at position `pos`.
#[inline(always)]
pub(super) fn header(pos: u64, len: u32) -> u64 {
    (u64::from(tag(pos)) << 32) | u64::from(len)
}

/// The word a sender keeps at its tail `pos`: its tag never matches there.
#[inline(always)]
pub(super) fn end_mark(pos: u64) -> u64 {
    u64::from(!tag(pos)) << 32
}
/// Sizes and offsets derived from (slots, ring_bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) slots: usize,
    pub(super) ring: usize,
    pub(super) data: usize,
    pub(super) size: usize,
}

impl Layout {
    pub(super) fn new(slots: usize, ring: usize) -> Option<Layout> {
        if !(1..=MAX_SLOTS).contains(&slots)
            || !ring.is_power_of_two()
            || !(MIN_RING_BYTES..=MAX_RING_BYTES).contains(&ring)
        {
            return None;
        }
        let ctrl = (slots * CTRL_STRIDE).next_multiple_of(PAGE);
        let data = HEADER_BYTES + ctrl;
        let size = data.checked_add(slots.checked_mul(ring)?)?;
        Some(Layout {
            slots,
            ring,
            data,
            size,
        })
    }

    pub(super) fn ctrl(&self, slot: usize) -> usize {
        HEADER_BYTES + slot * CTRL_STRIDE
    }

    pub(super) fn ring_off(&self, slot: usize) -> usize {
        self.data + slot * self.ring
    }

    pub(super) fn max_record(&self) -> usize {
        max_record_for_ring(self.ring)
    }

    pub(super) fn valid_mask(&self) -> u64 {
        if self.slots == 64 {
            u64::MAX
        } else {
            (1u64 << self.slots) - 1
        }
    }
}
