//! Remote atomic operations: what they compute. The wire codes of operations and
//! types are libfabric's `enum fi_op` and `enum fi_datatype` values (so the provider
//! passes them through); values are in the target's byte order, as MX carries bytes
//! as they are. The engine carries requests and replies (`onesided.rs`); whoever
//! owns the memory applies them with [`AtomicJob::apply`], one at a time.

use crate::types::{MemHandle, PartnerId};
use bytes::Bytes;

/// Operand bytes one request may carry per vector (a compare operation carries two):
/// a request (20-byte head and both vectors) and its reply stay single SMALL frames,
/// which the one-sided path takes whole (6 64-bit elements, 48 bytes).
pub const ATOMIC_MAX_BYTES: usize = 48;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    Min,
    Max,
    Sum,
    Prod,
    Lor,
    Land,
    Bor,
    Band,
    Lxor,
    Bxor,
    Read,
    Write,
    Cswap,
    CswapNe,
    CswapLe,
    CswapLt,
    CswapGe,
    CswapGt,
    Mswap,
}

const OPS: [AtomicOp; 19] = [
    AtomicOp::Min,
    AtomicOp::Max,
    AtomicOp::Sum,
    AtomicOp::Prod,
    AtomicOp::Lor,
    AtomicOp::Land,
    AtomicOp::Bor,
    AtomicOp::Band,
    AtomicOp::Lxor,
    AtomicOp::Bxor,
    AtomicOp::Read,
    AtomicOp::Write,
    AtomicOp::Cswap,
    AtomicOp::CswapNe,
    AtomicOp::CswapLe,
    AtomicOp::CswapLt,
    AtomicOp::CswapGe,
    AtomicOp::CswapGt,
    AtomicOp::Mswap,
];

impl AtomicOp {
    pub fn from_code(code: u8) -> Option<AtomicOp> {
        OPS.get(code as usize).copied()
    }

    pub fn code(self) -> u8 {
        OPS.iter().position(|&o| o == self).expect("listed") as u8
    }

    /// Compare operations take a compare vector beside the operands.
    pub fn compares(self) -> bool {
        self.code() >= AtomicOp::Cswap.code()
    }

    /// Only reads: needs read permission and writes nothing.
    pub fn reads_only(self) -> bool {
        self == AtomicOp::Read
    }

    fn bitwise(self) -> bool {
        matches!(
            self,
            AtomicOp::Bor | AtomicOp::Band | AtomicOp::Bxor | AtomicOp::Mswap
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicType {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
}

const TYPES: [AtomicType; 10] = [
    AtomicType::I8,
    AtomicType::U8,
    AtomicType::I16,
    AtomicType::U16,
    AtomicType::I32,
    AtomicType::U32,
    AtomicType::I64,
    AtomicType::U64,
    AtomicType::F32,
    AtomicType::F64,
];

impl AtomicType {
    pub fn from_code(code: u8) -> Option<AtomicType> {
        TYPES.get(code as usize).copied()
    }

    pub fn code(self) -> u8 {
        TYPES.iter().position(|&t| t == self).expect("listed") as u8
    }

    pub fn size(self) -> usize {
        match self {
            AtomicType::I8 | AtomicType::U8 => 1,
            AtomicType::I16 | AtomicType::U16 => 2,
            AtomicType::I32 | AtomicType::U32 | AtomicType::F32 => 4,
            AtomicType::I64 | AtomicType::U64 | AtomicType::F64 => 8,
        }
    }

    fn float(self) -> bool {
        matches!(self, AtomicType::F32 | AtomicType::F64)
    }
}

/// How an operation is issued: plain (`fi_atomic`), fetching the old values
/// (`fi_fetch_atomic`) or comparing (`fi_compare_atomic`, which fetches too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicKind {
    Plain,
    Fetch,
    Compare,
}

/// Whether `op` on `ty` exists for `kind`, and the largest element count of one
/// request (0 when it does not exist).
pub fn atomic_valid(op: AtomicOp, ty: AtomicType, kind: AtomicKind) -> usize {
    let by_kind = match kind {
        AtomicKind::Plain => !op.compares() && !op.reads_only(),
        AtomicKind::Fetch => !op.compares(),
        AtomicKind::Compare => op.compares(),
    };
    if !by_kind || (op.bitwise() && ty.float()) {
        return 0;
    }
    ATOMIC_MAX_BYTES / ty.size()
}

/// A remote atomic request the memory's owner must apply, then report with
/// [`crate::Engine::atomic_done`] and the old values when `fetch`.
#[derive(Clone, Debug)]
pub struct AtomicJob {
    pub partner: PartnerId,
    pub id: u32,
    pub handle: MemHandle,
    pub offset: u64,
    /// Bytes of target memory covered (elements times the type's size).
    pub len: u32,
    pub op: AtomicOp,
    pub ty: AtomicType,
    /// The operand vector (none for reads), then the compare vector for compare
    /// operations, each `len` bytes.
    pub operands: Bytes,
    pub fetch: bool,
}

impl AtomicJob {
    /// Applies the operation to `target` (the covered bytes, read by the caller), in
    /// place; returns whether it changed them (the caller then writes them back).
    pub fn apply(&self, target: &mut [u8]) -> bool {
        if self.op.reads_only() {
            return false;
        }
        let n = target.len().min(self.operands.len());
        let (operand, compare) = self.operands.split_at(n);
        apply(self.op, self.ty, target, operand, compare)
    }
}

trait Elem: Copy + PartialOrd {
    const SIZE: usize;
    const ZERO: Self;
    const ONE: Self;
    fn load(b: &[u8]) -> Self;
    fn store(self, b: &mut [u8]);
    fn sum(self, o: Self) -> Self;
    fn prod(self, o: Self) -> Self;
    /// `(or, and, xor)` of the bits; floats have none (refused before).
    fn bits(self, o: Self) -> (Self, Self, Self);
    fn not(self) -> Self;
}

macro_rules! elem_int {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            const ZERO: Self = 0;
            const ONE: Self = 1;
            fn load(b: &[u8]) -> Self { <$t>::from_ne_bytes(b.try_into().expect("sized")) }
            fn store(self, b: &mut [u8]) { b.copy_from_slice(&self.to_ne_bytes()) }
            fn sum(self, o: Self) -> Self { self.wrapping_add(o) }
            fn prod(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn bits(self, o: Self) -> (Self, Self, Self) { (self | o, self & o, self ^ o) }
            fn not(self) -> Self { !self }
        }
    )*};
}
elem_int!(i8, u8, i16, u16, i32, u32, i64, u64);

macro_rules! elem_float {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn load(b: &[u8]) -> Self { <$t>::from_ne_bytes(b.try_into().expect("sized")) }
            fn store(self, b: &mut [u8]) { b.copy_from_slice(&self.to_ne_bytes()) }
            fn sum(self, o: Self) -> Self { self + o }
            fn prod(self, o: Self) -> Self { self * o }
            fn bits(self, _: Self) -> (Self, Self, Self) { (self, self, self) }
            fn not(self) -> Self { self }
        }
    )*};
}
elem_float!(f32, f64);

/// The new value of one element: `t` the target's, `o` the operand, `c` the compare.
fn combine<T: Elem>(op: AtomicOp, t: T, o: T, c: T) -> T {
    let truth = |b: bool| if b { T::ONE } else { T::ZERO };
    let (tt, ot) = (t != T::ZERO, o != T::ZERO);
    let (or, and, xor) = t.bits(o);
    let swap_if = |b: bool| if b { o } else { t };
    match op {
        AtomicOp::Min => swap_if(o < t),
        AtomicOp::Max => swap_if(o > t),
        AtomicOp::Sum => t.sum(o),
        AtomicOp::Prod => t.prod(o),
        AtomicOp::Lor => truth(tt || ot),
        AtomicOp::Land => truth(tt && ot),
        AtomicOp::Lxor => truth(tt != ot),
        AtomicOp::Bor => or,
        AtomicOp::Band => and,
        AtomicOp::Bxor => xor,
        AtomicOp::Read => t,
        AtomicOp::Write => o,
        AtomicOp::Cswap => swap_if(c == t),
        AtomicOp::CswapNe => swap_if(c != t),
        AtomicOp::CswapLe => swap_if(c <= t),
        AtomicOp::CswapLt => swap_if(c < t),
        AtomicOp::CswapGe => swap_if(c >= t),
        AtomicOp::CswapGt => swap_if(c > t),
        // (o & c) | (t & !c)
        AtomicOp::Mswap => {
            let (_, oc, _) = o.bits(c);
            let (_, tnc, _) = t.bits(c.not());
            oc.bits(tnc).0
        }
    }
}

fn apply_as<T: Elem>(op: AtomicOp, target: &mut [u8], operand: &[u8], compare: &[u8]) -> bool {
    let mut changed = false;
    for (i, t) in target.chunks_exact_mut(T::SIZE).enumerate() {
        let at = i * T::SIZE..(i + 1) * T::SIZE;
        let o = operand.get(at.clone()).map_or(T::ZERO, T::load);
        let c = compare.get(at).map_or(T::ZERO, T::load);
        let old = T::load(t);
        let new = combine(op, old, o, c);
        // Compared as bits: a NaN stored again is no change.
        let mut bytes = [0u8; 8];
        new.store(&mut bytes[..T::SIZE]);
        if bytes[..T::SIZE] != t[..] {
            t.copy_from_slice(&bytes[..T::SIZE]);
            changed = true;
        }
    }
    changed
}

/// Applies `op` element by element: `target[i] = op(target[i], operand[i],
/// compare[i])`. Returns whether any byte changed.
pub fn apply(
    op: AtomicOp,
    ty: AtomicType,
    target: &mut [u8],
    operand: &[u8],
    compare: &[u8],
) -> bool {
    match ty {
        AtomicType::I8 => apply_as::<i8>(op, target, operand, compare),
        AtomicType::U8 => apply_as::<u8>(op, target, operand, compare),
        AtomicType::I16 => apply_as::<i16>(op, target, operand, compare),
        AtomicType::U16 => apply_as::<u16>(op, target, operand, compare),
        AtomicType::I32 => apply_as::<i32>(op, target, operand, compare),
        AtomicType::U32 => apply_as::<u32>(op, target, operand, compare),
        AtomicType::I64 => apply_as::<i64>(op, target, operand, compare),
        AtomicType::U64 => apply_as::<u64>(op, target, operand, compare),
        AtomicType::F32 => apply_as::<f32>(op, target, operand, compare),
        AtomicType::F64 => apply_as::<f64>(op, target, operand, compare),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<T: Elem>(op: AtomicOp, ty: AtomicType, t: T, o: T, c: T) -> T {
        let (mut tb, mut ob, mut cb) = ([0u8; 8], [0u8; 8], [0u8; 8]);
        t.store(&mut tb[..T::SIZE]);
        o.store(&mut ob[..T::SIZE]);
        c.store(&mut cb[..T::SIZE]);
        apply(op, ty, &mut tb[..T::SIZE], &ob[..T::SIZE], &cb[..T::SIZE]);
        T::load(&tb[..T::SIZE])
    }

    #[test]
    fn codes_are_libfabrics() {
        assert_eq!(AtomicOp::Min.code(), 0);
        assert_eq!(AtomicOp::Read.code(), 10);
        assert_eq!(AtomicOp::Cswap.code(), 12);
        assert_eq!(AtomicOp::Mswap.code(), 18);
        assert_eq!(AtomicOp::from_code(19), None);
        assert_eq!(AtomicType::F64.code(), 9);
        assert_eq!(AtomicType::from_code(10), None);
    }

    #[test]
    fn integer_ops() {
        use AtomicOp::*;
        let t = AtomicType::I32;
        assert_eq!(run::<i32>(Min, t, 5, -3, 0), -3);
        assert_eq!(run::<i32>(Max, t, 5, -3, 0), 5);
        assert_eq!(run::<i32>(Sum, t, i32::MAX, 1, 0), i32::MIN);
        assert_eq!(run::<i32>(Prod, t, -4, 6, 0), -24);
        assert_eq!(run::<i32>(Lor, t, 0, 7, 0), 1);
        assert_eq!(run::<i32>(Land, t, 3, 0, 0), 0);
        assert_eq!(run::<i32>(Lxor, t, 3, 9, 0), 0);
        assert_eq!(run::<i32>(Bor, t, 0b1010, 0b0101, 0), 0b1111);
        assert_eq!(run::<i32>(Band, t, 0b1110, 0b0111, 0), 0b0110);
        assert_eq!(run::<i32>(Bxor, t, 0b1110, 0b0111, 0), 0b1001);
        assert_eq!(run::<i32>(Write, t, 1, 42, 0), 42);
        assert_eq!(run::<i32>(Cswap, t, 7, 9, 7), 9);
        assert_eq!(run::<i32>(Cswap, t, 7, 9, 6), 7);
        assert_eq!(run::<i32>(CswapNe, t, 7, 9, 6), 9);
        assert_eq!(run::<i32>(CswapLe, t, 7, 9, 7), 9);
        assert_eq!(run::<i32>(CswapLt, t, 7, 9, 7), 7);
        assert_eq!(run::<i32>(CswapGe, t, 7, 9, 8), 9);
        assert_eq!(run::<i32>(CswapGt, t, 7, 9, 7), 7);
        assert_eq!(run::<i32>(Mswap, t, 0xf0, 0x0f, 0x0c), 0xfc);
        assert_eq!(run::<u8>(Sum, AtomicType::U8, 255, 2, 0), 1);
        assert_eq!(run::<u64>(Min, AtomicType::U64, u64::MAX, 3, 0), 3);
    }

    #[test]
    fn float_ops() {
        use AtomicOp::*;
        assert_eq!(run::<f64>(Sum, AtomicType::F64, 1.5, 2.25, 0.0), 3.75);
        assert_eq!(run::<f32>(Prod, AtomicType::F32, 1.5, -2.0, 0.0), -3.0);
        assert_eq!(run::<f64>(Min, AtomicType::F64, 1.5, -2.0, 0.0), -2.0);
        assert_eq!(run::<f64>(Cswap, AtomicType::F64, 1.5, 8.0, 1.5), 8.0);
        assert_eq!(
            atomic_valid(Bor, AtomicType::F32, AtomicKind::Plain),
            0,
            "no bits in floats"
        );
        assert_eq!(
            atomic_valid(Sum, AtomicType::F32, AtomicKind::Plain),
            ATOMIC_MAX_BYTES / 4
        );
    }

    #[test]
    fn kinds() {
        use AtomicOp::*;
        let t = AtomicType::U64;
        assert_eq!(atomic_valid(Read, t, AtomicKind::Plain), 0);
        assert!(atomic_valid(Read, t, AtomicKind::Fetch) > 0);
        assert_eq!(atomic_valid(Cswap, t, AtomicKind::Fetch), 0);
        assert!(atomic_valid(Mswap, t, AtomicKind::Compare) > 0);
        assert_eq!(atomic_valid(Sum, t, AtomicKind::Compare), 0);
    }

    #[test]
    fn vectors_apply_element_by_element() {
        let job = AtomicJob {
            partner: PartnerId(0),
            id: 1,
            handle: MemHandle(0),
            offset: 0,
            len: 6,
            op: AtomicOp::Sum,
            ty: AtomicType::U16,
            operands: Bytes::from(
                [1u16, 2, 3]
                    .iter()
                    .flat_map(|v| v.to_ne_bytes())
                    .collect::<Vec<_>>(),
            ),
            fetch: true,
        };
        let mut target: Vec<u8> = [10u16, 20, 30]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        assert!(job.apply(&mut target));
        let got: Vec<u16> = target
            .chunks(2)
            .map(|c| u16::from_ne_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(got, [11, 22, 33]);
    }
}
