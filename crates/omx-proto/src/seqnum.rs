//! 16-bit library sequence numbers: 14 bits of sequence, 2 bits of partner "session number"
//! (bumped when a partner is reset so late packets of the old stream are rejected).

pub const SEQ_BITS: u32 = 14;
pub const SEQ_MASK: u16 = (1 << SEQ_BITS) - 1;
pub const SESNUM_MASK: u16 = !SEQ_MASK;
/// Unacked sequence numbers allowed in flight per partner (half the space, so that
/// modular comparisons stay unambiguous).
pub const MAX_IN_FLIGHT: u16 = SEQ_MASK / 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Seq(pub u16);

impl Seq {
    /// The first number of a stream with the given session number.
    pub fn first(sesnum: u16) -> Seq {
        Seq((sesnum & SESNUM_MASK) | 1)
    }

    pub fn sesnum(self) -> u16 {
        self.0 & SESNUM_MASK
    }

    pub fn next(self) -> Seq {
        self.advance(1)
    }

    pub fn advance(self, n: u16) -> Seq {
        Seq(self.sesnum() | (self.0.wrapping_add(n) & SEQ_MASK))
    }

    /// Distance from `earlier` to `self` modulo 2^14 (ignores session numbers).
    pub fn since(self, earlier: Seq) -> u16 {
        self.0.wrapping_sub(earlier.0) & SEQ_MASK
    }

    /// `self` strictly before `other`, assuming both lie within half the space.
    pub fn before(self, other: Seq) -> bool {
        let d = other.since(self);
        d != 0 && d <= MAX_IN_FLIGHT
    }

    /// Same stream number with the session number bumped (partner reset).
    pub fn bump_sesnum(self) -> Seq {
        Seq(self.sesnum().wrapping_add(1 << SEQ_BITS) & SESNUM_MASK | 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_within_14_bits_keeping_sesnum() {
        let s = Seq(0x4000 | SEQ_MASK);
        assert_eq!(s.next(), Seq(0x4000));
        assert_eq!(s.next().since(s), 1);
        assert!(s.before(s.next()));
        assert!(!s.next().before(s));
    }

    #[test]
    fn bump_changes_sesnum_and_restarts() {
        let s = Seq(0xC000 | 77);
        let b = s.bump_sesnum();
        assert_eq!(b, Seq(1));
        assert_eq!(Seq(5).bump_sesnum(), Seq(0x4001));
    }
}
