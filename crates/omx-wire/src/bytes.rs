//! Big-endian field access on fixed-size header arrays.
//!
//! Offsets are const generics checked against the array size at compile
//! time (an out-of-range offset fails to build), so field access can never
//! panic and the optimizer drops every bounds check.

/// Read-only view of a received header of exactly `N` bytes.
#[derive(Clone, Copy)]
pub(crate) struct Reader<'a, const N: usize>(pub(crate) &'a [u8; N]);

impl<const N: usize> Reader<'_, N> {
    #[inline(always)]
    pub(crate) fn u8<const OFF: usize>(&self) -> u8 {
        const { assert!(OFF < N) };
        self.0[OFF]
    }

    #[inline(always)]
    pub(crate) fn u16<const OFF: usize>(&self) -> u16 {
        const { assert!(OFF + 2 <= N) };
        u16::from_be_bytes([self.0[OFF], self.0[OFF + 1]])
    }

    #[inline(always)]
    pub(crate) fn u32<const OFF: usize>(&self) -> u32 {
        const { assert!(OFF + 4 <= N) };
        u32::from_be_bytes([
            self.0[OFF],
            self.0[OFF + 1],
            self.0[OFF + 2],
            self.0[OFF + 3],
        ])
    }

    /// `match_a` at `OFF` (high half) followed by `match_b` (low half).
    #[inline(always)]
    pub(crate) fn u64<const OFF: usize>(&self) -> u64 {
        const { assert!(OFF + 8 <= N) };
        let mut b = [0u8; 8];
        let mut i = 0;
        while i < 8 {
            b[i] = self.0[OFF + i];
            i += 1;
        }
        u64::from_be_bytes(b)
    }

    #[inline(always)]
    pub(crate) fn mac<const OFF: usize>(&self) -> [u8; 6] {
        const { assert!(OFF + 6 <= N) };
        [
            self.0[OFF],
            self.0[OFF + 1],
            self.0[OFF + 2],
            self.0[OFF + 3],
            self.0[OFF + 4],
            self.0[OFF + 5],
        ]
    }
}

/// Zero-initialised header of exactly `N` bytes being built for sending;
/// untouched bytes (pads, unset fields) stay zero.
pub(crate) struct Writer<const N: usize>(pub(crate) [u8; N]);

impl<const N: usize> Writer<N> {
    #[inline(always)]
    pub(crate) fn new() -> Self {
        Writer([0; N])
    }

    #[inline(always)]
    pub(crate) fn u8<const OFF: usize>(&mut self, v: u8) {
        const { assert!(OFF < N) };
        self.0[OFF] = v;
    }

    #[inline(always)]
    pub(crate) fn u16<const OFF: usize>(&mut self, v: u16) {
        const { assert!(OFF + 2 <= N) };
        let b = v.to_be_bytes();
        self.0[OFF] = b[0];
        self.0[OFF + 1] = b[1];
    }

    #[inline(always)]
    pub(crate) fn u32<const OFF: usize>(&mut self, v: u32) {
        const { assert!(OFF + 4 <= N) };
        let b = v.to_be_bytes();
        self.0[OFF] = b[0];
        self.0[OFF + 1] = b[1];
        self.0[OFF + 2] = b[2];
        self.0[OFF + 3] = b[3];
    }

    #[inline(always)]
    pub(crate) fn u64<const OFF: usize>(&mut self, v: u64) {
        const { assert!(OFF + 8 <= N) };
        let b = v.to_be_bytes();
        let mut i = 0;
        while i < 8 {
            self.0[OFF + i] = b[i];
            i += 1;
        }
    }

    #[inline(always)]
    pub(crate) fn mac<const OFF: usize>(&mut self, v: [u8; 6]) {
        const { assert!(OFF + 6 <= N) };
        let mut i = 0;
        while i < 6 {
            self.0[OFF + i] = v[i];
            i += 1;
        }
    }
}
