//! Per-endpoint frame selection, compiled to classic BPF.
//!
//! Several processes (one per endpoint group) may open packet sockets on the
//! same interface and EtherType. Without a filter each of them would get a
//! copy of every frame and throw most away; the kernel runs this program
//! before copying, so each socket only pays for its own traffic.
//!
//! The program loads the fields at the offsets [`omx_wire::peek`] defines and
//! compares them with its type numbers; [`EndpointFilter::accepts`] is the same
//! selection written with `peek`'s readers, and the tests check that both agree.

use crate::sys::SockFilter;
use omx_wire::peek::{
    self, BOARD_TYPES, DST_ENDPOINT_OFFSET, ENDPOINT_TYPES, ETHERTYPE_OFFSET,
    MAGIC_ENDPOINT_OFFSET, MAGIC_ENDPOINT_XOR, NACK_LIB_DST_ENDPOINT_OFFSET,
    PULL_REPLY_MAGIC_OFFSET, PULL_SESSION_OFFSET, TYPE_BUNDLE, TYPE_NACK_LIB, TYPE_NACK_MCP,
    TYPE_OFFSET, TYPE_PULL_REPLY,
};
use omx_wire::{
    stripe_magic, CHECKSUM_FLAG, LATENCY_FLAG, STRIPE_PULL_REPLY_TYPE, STRIPE_PULL_TYPE,
};

/// Which frames of the EtherType a socket should see.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointFilter {
    /// Local endpoint indexes whose frames are wanted (order and duplicates irrelevant).
    pub endpoints: Vec<u8>,
    /// Also accept board frames (RAW, HOST_QUERY, HOST_REPLY); normally set on
    /// exactly one socket per board, the one answering host queries.
    pub board_frames: bool,
    /// Only frames carrying the latency flag (bit 0x80 of the type byte): the filter
    /// of a wake-up socket, which sleeping threads watch instead of the data socket.
    pub marked_only: bool,
    /// Leave out the pull replies (without checksum trailer) of this endpoint: a
    /// [`crate::DirectRx`] socket takes them.
    pub direct: Option<u8>,
}

/// Both flags: the type is the rest of the byte (as `omx_wire::type_of` strips them).
const TYPE_FLAGS: u8 = LATENCY_FLAG | CHECKSUM_FLAG;

impl EndpointFilter {
    pub fn new(endpoints: impl IntoIterator<Item = u8>, board_frames: bool) -> EndpointFilter {
        EndpointFilter {
            endpoints: endpoints.into_iter().collect(),
            board_frames,
            marked_only: false,
            direct: None,
        }
    }

    /// Whether `frame` is a pull reply without checksum trailer for `endpoint`: what a
    /// [`crate::DirectRx`] socket of that endpoint takes (reference semantics of
    /// [`EndpointFilter::compile_direct`]).
    pub fn is_direct_pull_reply(ethertype: u16, frame: &[u8], endpoint: u8) -> bool {
        peek::ethertype(frame) == Some(ethertype)
            && peek::is_unchecksummed_pull_reply(frame)
            && peek::dst_endpoint(frame) == Some(endpoint)
    }

    /// Classic BPF program of a direct socket: the pull replies (without checksum
    /// trailer, which the receiver must verify before placing anything) of `endpoint`.
    pub fn compile_direct(ethertype: u16, endpoint: u8) -> Vec<SockFilter> {
        let mut a = Asm::default();
        a.ethertype_only(ethertype);
        a.op(ld_b(TYPE_OFFSET));
        a.direct_pull_reply_test(endpoint);
        a.op(ret(ACCEPT));
        a.op(ret(0));
        a.finish()
    }

    /// Reference semantics of the compiled program (same answer for every
    /// frame): useful to re-check frames queued before a filter change.
    pub fn accepts(&self, ethertype: u16, frame: &[u8]) -> bool {
        if peek::ethertype(frame) != Some(ethertype) {
            return false;
        }
        let Some(t) = peek::type_byte(frame) else {
            return false;
        };
        if self.marked_only && t & LATENCY_FLAG == 0 {
            return false;
        }
        if self
            .direct
            .is_some_and(|e| Self::is_direct_pull_reply(ethertype, frame, e))
        {
            return false;
        }
        if self.board_frames && peek::is_board_frame(frame) {
            return true;
        }
        // Striped pulls name an endpoint too, but on a board the endpoint may not be
        // open on: its [`StripeFilter`] socket there takes them.
        if peek::is_striped(frame) {
            return false;
        }
        peek::dst_endpoint(frame).is_some_and(|e| self.endpoints.contains(&e))
    }

    /// Compiles the filter to a classic BPF program for `SO_ATTACH_FILTER`.
    ///
    /// Layout: check EtherType, load the type byte, accept board types if
    /// wanted, then load the endpoint byte from the type-specific offset and
    /// compare it against the wanted endpoints, merged into ranges. Classic
    /// BPF only jumps forward with 8-bit conditional offsets, so every
    /// comparison in the (possibly long) endpoint list is followed by its own
    /// `ret accept`; the total stays far below the kernel's 4096-instruction cap.
    pub fn compile(&self, ethertype: u16) -> Vec<SockFilter> {
        let mut a = Asm::default();
        a.ethertype_only(ethertype);
        a.op(ld_b(TYPE_OFFSET));
        if self.marked_only {
            a.jump(JSET, LATENCY_FLAG as u32, Target::Next(1), Target::Next(0));
            a.op(ret(0));
        }
        if let Some(e) = self.direct {
            // Pull replies of `e` without checksum go to its direct socket: skip them
            // here (the type byte is reloaded below).
            a.direct_pull_reply_test(e);
            a.op(ret(0));
            a.op(ld_b(TYPE_OFFSET));
        }
        a.op(alu(BPF_AND, (!TYPE_FLAGS) as u32 & 0xff));
        if self.board_frames {
            for t in BOARD_TYPES {
                a.jump(JEQ, t as u32, Target::Label(L_ACCEPT), Target::Next(0));
            }
        }
        let ranges = ranges(&self.endpoints);
        if !ranges.is_empty() {
            a.jump(
                JEQ,
                TYPE_PULL_REPLY as u32,
                Target::Label(L_PULL),
                Target::Next(0),
            );
            a.jump(
                JEQ,
                TYPE_NACK_MCP as u32,
                Target::Label(L_PULL),
                Target::Next(0),
            );
            a.jump(
                JEQ,
                TYPE_NACK_LIB as u32,
                Target::Label(L_NACK_LIB),
                Target::Next(0),
            );
            a.jump(
                JEQ,
                TYPE_BUNDLE as u32,
                Target::Label(L_COMMON),
                Target::Next(0),
            );
            a.jump(
                JGT,
                *ENDPOINT_TYPES.end() as u32,
                Target::Label(L_DROP),
                Target::Next(0),
            );
            a.jump(
                JGE,
                *ENDPOINT_TYPES.start() as u32,
                Target::Label(L_COMMON),
                Target::Label(L_DROP),
            );
        }
        a.label(L_DROP);
        a.op(ret(0));
        a.label(L_ACCEPT);
        a.op(ret(ACCEPT));
        if !ranges.is_empty() {
            a.label(L_COMMON);
            a.op(ld_b(DST_ENDPOINT_OFFSET));
            a.jump(JA, 0, Target::Label(L_CHECK), Target::Next(0));
            a.label(L_NACK_LIB);
            a.op(ld_b(NACK_LIB_DST_ENDPOINT_OFFSET));
            a.jump(JA, 0, Target::Label(L_CHECK), Target::Next(0));
            a.label(L_PULL);
            a.op(ld_b(MAGIC_ENDPOINT_OFFSET));
            a.op(alu(BPF_XOR, MAGIC_ENDPOINT_XOR as u32));
            a.label(L_CHECK);
            for (lo, hi) in ranges {
                if lo == hi {
                    a.op(SockFilter {
                        code: JEQ,
                        jt: 0,
                        jf: 1,
                        k: lo as u32,
                    });
                } else {
                    a.op(SockFilter {
                        code: JGE,
                        jt: 0,
                        jf: 2,
                        k: lo as u32,
                    });
                    a.op(SockFilter {
                        code: JGT,
                        jt: 1,
                        jf: 0,
                        k: hi as u32,
                    });
                }
                a.op(ret(ACCEPT));
            }
            a.op(ret(0));
        }
        a.finish()
    }
}

/// What an endpoint's socket on one of its other boards takes (`OMX_STRIPE`): striped
/// PULLs for its endpoint and session, and striped PULL_REPLYs carrying its striped
/// magic ([`omx_wire::stripe_magic`]). Another process's endpoint with the same index
/// has another session, so neither takes the other's frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StripeFilter {
    pub endpoint: u8,
    pub session: u32,
}

impl StripeFilter {
    /// Reference semantics of [`StripeFilter::compile`].
    pub fn accepts(&self, ethertype: u16, frame: &[u8]) -> bool {
        if peek::ethertype(frame) != Some(ethertype) {
            return false;
        }
        match peek::packet_type(frame) {
            Some(STRIPE_PULL_TYPE) => {
                peek::dst_endpoint(frame) == Some(self.endpoint)
                    && peek::u32_at(frame, PULL_SESSION_OFFSET) == Some(self.session)
            }
            Some(STRIPE_PULL_REPLY_TYPE) => {
                peek::u32_at(frame, PULL_REPLY_MAGIC_OFFSET)
                    == Some(stripe_magic(self.endpoint, self.session))
            }
            _ => false,
        }
    }

    /// Classic BPF program for `SO_ATTACH_FILTER`.
    pub fn compile(&self, ethertype: u16) -> Vec<SockFilter> {
        let mut a = Asm::default();
        a.ethertype_only(ethertype);
        a.op(ld_b(TYPE_OFFSET));
        a.op(alu(BPF_AND, (!TYPE_FLAGS) as u32 & 0xff));
        a.jump(
            JEQ,
            STRIPE_PULL_TYPE as u32,
            Target::Label(L_COMMON),
            Target::Next(0),
        );
        a.jump(
            JEQ,
            STRIPE_PULL_REPLY_TYPE as u32,
            Target::Label(L_PULL),
            Target::Label(L_DROP),
        );
        a.label(L_COMMON);
        a.op(ld_b(DST_ENDPOINT_OFFSET));
        a.jump(
            JEQ,
            self.endpoint as u32,
            Target::Next(0),
            Target::Label(L_DROP),
        );
        a.op(ld_w(PULL_SESSION_OFFSET));
        a.jump(
            JEQ,
            self.session,
            Target::Label(L_ACCEPT),
            Target::Label(L_DROP),
        );
        a.label(L_PULL);
        a.op(ld_w(PULL_REPLY_MAGIC_OFFSET));
        a.jump(
            JEQ,
            stripe_magic(self.endpoint, self.session),
            Target::Label(L_ACCEPT),
            Target::Next(0),
        );
        a.label(L_DROP);
        a.op(ret(0));
        a.label(L_ACCEPT);
        a.op(ret(ACCEPT));
        a.finish()
    }
}

/// A program that accepts every frame of `ethertype` and nothing else: for sockets
/// bound to all protocols, the only ones that see the host's own transmissions.
pub(crate) fn ethertype_only(ethertype: u16) -> Vec<SockFilter> {
    vec![
        ld_h(ETHERTYPE_OFFSET),
        SockFilter {
            code: JEQ,
            jt: 0,
            jf: 1,
            k: u32::from(ethertype),
        },
        ret(ACCEPT),
        ret(0),
    ]
}

/// Sorted, merged inclusive ranges of the given endpoint indexes.
fn ranges(eps: &[u8]) -> Vec<(u8, u8)> {
    let mut v = eps.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out: Vec<(u8, u8)> = Vec::new();
    for e in v {
        match out.last_mut() {
            Some((_, hi)) if *hi as u16 + 1 == e as u16 => *hi = e,
            _ => out.push((e, e)),
        }
    }
    out
}

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
const BPF_LD: u16 = 0x00;
const BPF_ALU: u16 = 0x04;
const BPF_JMP: u16 = 0x05;
const BPF_RET: u16 = 0x06;
const BPF_W: u16 = 0x00;
const BPF_H: u16 = 0x08;
const BPF_B: u16 = 0x10;
const BPF_ABS: u16 = 0x20;
const BPF_K: u16 = 0x00;
const BPF_XOR: u16 = 0xa0;
const BPF_AND: u16 = 0x50;
const JA: u16 = BPF_JMP;
const JEQ: u16 = BPF_JMP | 0x10 | BPF_K;
const JGT: u16 = BPF_JMP | 0x20 | BPF_K;
const JGE: u16 = BPF_JMP | 0x30 | BPF_K;
const JSET: u16 = BPF_JMP | 0x40 | BPF_K;
/// Snap length returned on accept: larger than any frame, so nothing is cut.
const ACCEPT: u32 = 0x0004_0000;

const L_DROP: usize = 0;
const L_ACCEPT: usize = 1;
const L_COMMON: usize = 2;
const L_NACK_LIB: usize = 3;
const L_PULL: usize = 4;
const L_CHECK: usize = 5;

/// `A op= k` (AND, XOR).
fn alu(op: u16, k: u32) -> SockFilter {
    SockFilter {
        code: BPF_ALU | op | BPF_K,
        jt: 0,
        jf: 0,
        k,
    }
}

fn ld_h(off: usize) -> SockFilter {
    SockFilter {
        code: BPF_LD | BPF_H | BPF_ABS,
        jt: 0,
        jf: 0,
        k: off as u32,
    }
}
fn ld_w(off: usize) -> SockFilter {
    SockFilter {
        code: BPF_LD | BPF_W | BPF_ABS,
        jt: 0,
        jf: 0,
        k: off as u32,
    }
}
fn ld_b(off: usize) -> SockFilter {
    SockFilter {
        code: BPF_LD | BPF_B | BPF_ABS,
        jt: 0,
        jf: 0,
        k: off as u32,
    }
}
fn ret(k: u32) -> SockFilter {
    SockFilter {
        code: BPF_RET | BPF_K,
        jt: 0,
        jf: 0,
        k,
    }
}

#[derive(Clone, Copy)]
enum Target {
    /// Skip this many following instructions.
    Next(u8),
    Label(usize),
}

/// Minimal two-pass assembler: jumps name labels, resolved in `finish`.
#[derive(Default)]
struct Asm {
    prog: Vec<SockFilter>,
    fixups: Vec<(usize, Target, Target)>,
    labels: [Option<usize>; 6],
}

impl Asm {
    fn op(&mut self, f: SockFilter) {
        self.prog.push(f);
    }
    /// With the type byte loaded: whether the frame is a pull reply without checksum
    /// for `endpoint` (what a direct socket takes). The caller emits the instruction
    /// to run on a match, then the one on a miss, right after.
    fn direct_pull_reply_test(&mut self, endpoint: u8) {
        self.op(alu(BPF_AND, (!LATENCY_FLAG) as u32 & 0xff));
        self.jump(
            JEQ,
            TYPE_PULL_REPLY as u32,
            Target::Next(0),
            Target::Next(4),
        );
        self.op(ld_b(MAGIC_ENDPOINT_OFFSET));
        self.op(alu(BPF_XOR, MAGIC_ENDPOINT_XOR as u32));
        self.jump(JEQ, endpoint as u32, Target::Next(0), Target::Next(1));
    }

    /// Drops every frame of another EtherType.
    fn ethertype_only(&mut self, ethertype: u16) {
        self.op(ld_h(ETHERTYPE_OFFSET));
        self.jump(JEQ, ethertype as u32, Target::Next(1), Target::Next(0));
        self.op(ret(0));
    }
    fn jump(&mut self, code: u16, k: u32, jt: Target, jf: Target) {
        self.fixups.push((self.prog.len(), jt, jf));
        self.prog.push(SockFilter {
            code,
            jt: 0,
            jf: 0,
            k,
        });
    }
    fn label(&mut self, l: usize) {
        self.labels[l] = Some(self.prog.len());
    }
    fn finish(mut self) -> Vec<SockFilter> {
        for (at, jt, jf) in std::mem::take(&mut self.fixups) {
            let off = |t: Target| -> u32 {
                match t {
                    Target::Next(n) => n as u32,
                    Target::Label(l) => {
                        let dest = self.labels[l].expect("jump to undefined label");
                        assert!(dest > at, "classic BPF jumps only forward");
                        (dest - at - 1) as u32
                    }
                }
            };
            let insn = &mut self.prog[at];
            if insn.code == JA {
                insn.k = off(jt);
            } else {
                insn.jt = u8::try_from(off(jt)).expect("BPF jump too far");
                insn.jf = u8::try_from(off(jf)).expect("BPF jump too far");
            }
        }
        self.prog
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ET: u16 = 0x86DF;

    /// Interpreter for the subset of classic BPF the compiler emits,
    /// following the kernel's rules (out-of-bounds load => return 0).
    fn run(prog: &[SockFilter], pkt: &[u8]) -> u32 {
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = prog[pc];
            pc += 1;
            match i.code {
                c if c == BPF_LD | BPF_H | BPF_ABS => {
                    let k = i.k as usize;
                    let Some(b) = pkt.get(k..k + 2) else { return 0 };
                    a = u16::from_be_bytes([b[0], b[1]]) as u32;
                }
                c if c == BPF_LD | BPF_W | BPF_ABS => {
                    let k = i.k as usize;
                    let Some(b) = pkt.get(k..k + 4) else { return 0 };
                    a = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                }
                c if c == BPF_LD | BPF_B | BPF_ABS => {
                    let Some(&b) = pkt.get(i.k as usize) else {
                        return 0;
                    };
                    a = b as u32;
                }
                c if c == BPF_ALU | BPF_XOR | BPF_K => a ^= i.k,
                c if c == BPF_ALU | BPF_AND | BPF_K => a &= i.k,
                c if c == BPF_RET | BPF_K => return i.k,
                JA => pc += i.k as usize,
                JEQ | JGT | JGE | JSET => {
                    let t = match i.code {
                        JEQ => a == i.k,
                        JGT => a > i.k,
                        JSET => a & i.k != 0,
                        _ => a >= i.k,
                    };
                    pc += if t { i.jt } else { i.jf } as usize;
                }
                c => panic!("unexpected opcode {c:#x}"),
            }
        }
    }

    fn frame(t: u8, ep17: u8, b25: u8, b31: u8) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[ETHERTYPE_OFFSET..ETHERTYPE_OFFSET + 2].copy_from_slice(&ET.to_be_bytes());
        f[TYPE_OFFSET] = t;
        f[DST_ENDPOINT_OFFSET] = ep17;
        f[NACK_LIB_DST_ENDPOINT_OFFSET] = b25;
        f[MAGIC_ENDPOINT_OFFSET] = b31;
        f
    }

    #[test]
    fn stripe_filter_takes_its_striped_pulls_and_replies_only() {
        let f = StripeFilter {
            endpoint: 3,
            session: 0xdead_beef,
        };
        let prog = f.compile(ET);
        let pull = |t: u8, ep: u8, session: u32| {
            let mut fr = frame(t, ep, 0, 0);
            fr[PULL_SESSION_OFFSET..PULL_SESSION_OFFSET + 4]
                .copy_from_slice(&session.to_be_bytes());
            fr
        };
        let reply = |t: u8, magic: u32| {
            let mut fr = frame(t, 0, 0, 0);
            fr[PULL_REPLY_MAGIC_OFFSET..PULL_REPLY_MAGIC_OFFSET + 4]
                .copy_from_slice(&magic.to_be_bytes());
            fr
        };
        let ours = stripe_magic(3, 0xdead_beef);
        let cases = [
            (pull(STRIPE_PULL_TYPE, 3, 0xdead_beef), true),
            (pull(STRIPE_PULL_TYPE | LATENCY_FLAG, 3, 0xdead_beef), true),
            (pull(STRIPE_PULL_TYPE, 4, 0xdead_beef), false),
            (pull(STRIPE_PULL_TYPE, 3, 0xdead_beee), false),
            (pull(TYPE_PULL_REPLY - 1, 3, 0xdead_beef), false),
            (reply(STRIPE_PULL_REPLY_TYPE, ours), true),
            (reply(STRIPE_PULL_REPLY_TYPE, stripe_magic(3, 1)), false),
            (
                reply(STRIPE_PULL_REPLY_TYPE, 3 ^ omx_wire::PULL_MAGIC_XOR),
                false,
            ),
            (reply(TYPE_PULL_REPLY, ours), false),
            (
                reply(STRIPE_PULL_REPLY_TYPE, ours)[..PULL_REPLY_MAGIC_OFFSET + 3].to_vec(),
                false,
            ),
        ];
        for (i, (fr, want)) in cases.iter().enumerate() {
            assert_eq!(f.accepts(ET, fr), *want, "reference, case {i}");
            assert_eq!(run(&prog, fr) != 0, *want, "program, case {i}");
        }
        let mut other = pull(STRIPE_PULL_TYPE, 3, 0xdead_beef);
        other[ETHERTYPE_OFFSET] ^= 1;
        assert!(!f.accepts(ET, &other) && run(&prog, &other) == 0);
    }

    #[test]
    fn ranges_merge() {
        assert_eq!(
            ranges(&[5, 1, 2, 3, 9, 255, 254, 2]),
            vec![(1, 3), (5, 5), (9, 9), (254, 255)]
        );
        assert!(ranges(&[]).is_empty());
    }

    #[test]
    fn routes_by_type() {
        let f = EndpointFilter::new([3], false);
        let p = f.compile(ET);
        assert!(run(&p, &frame(37, 3, 0, 0)) > 0, "TINY to 3");
        assert_eq!(run(&p, &frame(37, 4, 0, 0)), 0, "TINY to 4");
        assert!(
            run(&p, &frame(42, 9, 9, 3 ^ 0x80)) > 0,
            "PULL_REPLY by byte 31"
        );
        assert_eq!(
            run(&p, &frame(42, 3, 3, 3)),
            0,
            "PULL_REPLY ignores byte 17"
        );
        assert!(run(&p, &frame(45, 9, 9, 0x83)) > 0, "NACK_MCP by byte 31");
        assert!(run(&p, &frame(44, 9, 3, 9)) > 0, "NACK_LIB by byte 25");
        assert_eq!(run(&p, &frame(44, 3, 9, 3)), 0);
        assert_eq!(
            run(&p, &frame(1, 3, 3, 3)),
            0,
            "board frame without board_frames"
        );
        assert_eq!(run(&p, &frame(34, 3, 3, 3)), 0, "unknown type");
        assert!(run(&p, &frame(46, 3, 9, 9)) > 0, "BUNDLE by byte 17");
        assert_eq!(run(&p, &frame(47, 3, 3, 3)), 0, "unknown type");
        let mut other = frame(37, 3, 0, 0);
        other[ETHERTYPE_OFFSET] = 0x08;
        assert_eq!(run(&p, &other), 0, "other EtherType");
        assert_eq!(
            run(&p, &frame(37, 3, 0, 0)[..DST_ENDPOINT_OFFSET]),
            0,
            "short frame"
        );
    }

    #[test]
    fn latency_flag_is_ignored_for_routing_and_selects_wake_frames() {
        let data = EndpointFilter::new([3], false);
        let wake = EndpointFilter {
            direct: None,
            marked_only: true,
            ..data.clone()
        };
        let (d, w) = (data.compile(ET), wake.compile(ET));
        assert!(run(&d, &frame(37, 3, 0, 0)) > 0);
        assert!(
            run(&d, &frame(37 | 0x80, 3, 0, 0)) > 0,
            "marked TINY still routed"
        );
        assert_eq!(
            run(&w, &frame(37, 3, 0, 0)),
            0,
            "unmarked frames do not wake"
        );
        assert!(run(&w, &frame(37 | 0x80, 3, 0, 0)) > 0);
        assert_eq!(run(&w, &frame(37 | 0x80, 4, 0, 0)), 0, "other endpoint");
    }

    #[test]
    fn checksum_flag_is_ignored_for_routing() {
        let data = EndpointFilter::new([3], false);
        let d = data.compile(ET);
        for t in [37u8, 42, 44, 45] {
            let f = frame(t | CHECKSUM_FLAG, 3, 3, 3 ^ MAGIC_ENDPOINT_XOR);
            assert!(run(&d, &f) > 0, "type {t} with the checksum flag");
            assert!(data.accepts(ET, &f));
            let mut both = f.clone();
            both[TYPE_OFFSET] |= LATENCY_FLAG;
            assert!(run(&d, &both) > 0, "type {t} with both flags");
        }
        assert_eq!(
            run(&d, &frame(37 | CHECKSUM_FLAG, 4, 0, 0)),
            0,
            "other endpoint"
        );
    }

    #[test]
    fn direct_program_takes_exactly_the_unchecksummed_pull_replies_of_its_endpoint() {
        for ep in [0u8, 7, 255] {
            let p = EndpointFilter::compile_direct(ET, ep);
            for t in 0..=255u8 {
                for e in 0..=255u8 {
                    let fr = frame(t, e, e, e);
                    let want = t & !LATENCY_FLAG == TYPE_PULL_REPLY && e ^ MAGIC_ENDPOINT_XOR == ep;
                    assert_eq!(run(&p, &fr) > 0, want, "t={t} e={e} ep={ep}");
                    assert_eq!(EndpointFilter::is_direct_pull_reply(ET, &fr, ep), want);
                }
            }
            let mut other = frame(TYPE_PULL_REPLY, 0, 0, ep ^ MAGIC_ENDPOINT_XOR);
            other[ETHERTYPE_OFFSET] ^= 1;
            assert_eq!(run(&p, &other), 0, "other EtherType");
        }
        // The data socket of an endpoint with a direct socket leaves exactly those out.
        let data = EndpointFilter {
            direct: Some(3),
            ..EndpointFilter::new([3], false)
        };
        let d = data.compile(ET);
        let pr = frame(TYPE_PULL_REPLY | LATENCY_FLAG, 3, 3, 3 ^ MAGIC_ENDPOINT_XOR);
        assert_eq!(run(&d, &pr), 0);
        let summed = frame(
            TYPE_PULL_REPLY | CHECKSUM_FLAG,
            3,
            3,
            3 ^ MAGIC_ENDPOINT_XOR,
        );
        assert!(
            run(&d, &summed) > 0,
            "checksummed pull replies stay on the ring"
        );
        assert!(run(&d, &frame(TYPE_NACK_MCP, 3, 3, 3 ^ MAGIC_ENDPOINT_XOR)) > 0);
    }

    #[test]
    fn board_only_and_empty() {
        let b = EndpointFilter::new([], true).compile(ET);
        for t in BOARD_TYPES {
            assert!(run(&b, &frame(t, 0, 0, 0)) > 0);
        }
        assert_eq!(run(&b, &frame(37, 0, 0, 0)), 0);
        let none = EndpointFilter::default().compile(ET);
        for t in 0..=255 {
            assert_eq!(run(&none, &frame(t, 0, 0, 0)), 0);
        }
    }

    #[test]
    fn program_matches_reference_exhaustively() {
        // Pseudo-random endpoint sets, including all 256 endpoints (the
        // longest program), against every (type, endpoint byte) combination.
        let mut seed = 0x1234_5678u32;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        let mut sets: Vec<Vec<u8>> =
            vec![vec![], (0..=255).collect(), (0..=255).step_by(2).collect()];
        for _ in 0..20 {
            let n = rnd() % 40;
            sets.push((0..n).map(|_| rnd() as u8).collect());
        }
        for eps in sets {
            let direct = eps.first().copied();
            for (board, marked_only, direct) in [
                (false, false, None),
                (true, false, None),
                (false, true, None),
                (false, false, direct),
                (true, false, direct),
            ] {
                let f = EndpointFilter {
                    marked_only,
                    direct,
                    ..EndpointFilter::new(eps.iter().copied(), board)
                };
                let p = f.compile(ET);
                assert!(p.len() <= 4096);
                // Every type with and without the latency and checksum flags.
                for t in (0..=50u8)
                    .chain(0x40..=0x40 + 50)
                    .chain(0x80..=0x80 + 50)
                    .chain(0xC0..=0xC0 + 50)
                {
                    for e in 0..=255u8 {
                        let fr = frame(t, e, e, e);
                        assert_eq!(
                            run(&p, &fr) > 0,
                            f.accepts(ET, &fr),
                            "t={t} e={e} eps={eps:?}"
                        );
                    }
                }
            }
        }
    }
}
