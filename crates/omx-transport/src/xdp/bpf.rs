//! The XDP program, its XSKMAP and the `bpf(2)` calls that load and attach them,
//! hand-assembled: no clang, libbpf or bpftool is needed to build or run omx.
//!
//! The program steers each frame of the EtherType to the XSK registered in the map
//! under the frame's destination endpoint (offsets from [`omx_wire::peek`], the same
//! selection as the classic filter of [`crate::EndpointFilter`]), board frames to key
//! [`BOARD_KEY`], and passes everything else to the kernel untouched: other
//! EtherTypes, frames too short to classify, and frames for endpoints without an XSK
//! (`bpf_redirect_map` with `XDP_PASS` as the miss action), which packet sockets take.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use omx_wire::peek::{
    BOARD_TYPES, DST_ENDPOINT_OFFSET, ENDPOINT_TYPES, ETHERTYPE_OFFSET, MAGIC_ENDPOINT_OFFSET,
    MAGIC_ENDPOINT_XOR, NACK_LIB_DST_ENDPOINT_OFFSET, TYPE_BUNDLE, TYPE_NACK_LIB, TYPE_NACK_MCP,
    TYPE_OFFSET, TYPE_PULL_REPLY,
};
use omx_wire::{CHECKSUM_FLAG, LATENCY_FLAG};

/// XSKMAP key of the socket taking board frames (keys 0..=255 are endpoint indexes).
pub const BOARD_KEY: u32 = 256;
const MAP_ENTRIES: u32 = BOARD_KEY + 1;

// bpf(2) commands, map/program/attach types and XDP flags (uapi/linux/bpf.h,
// if_link.h) that the `libc` crate does not define.
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const BPF_PSEUDO_MAP_FD: u8 = 1;
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
const XDP_PASS: i32 = 2;
/// Size of the zeroed `union bpf_attr` passed to every command (larger than any
/// member used here; the kernel requires the unused tail to be zero).
const ATTR_LEN: usize = 128;

/// Calls `bpf(cmd, attr)`; returns the non-negative result.
fn bpf(cmd: libc::c_long, attr: &mut [u8; ATTR_LEN]) -> io::Result<i64> {
    // SAFETY: attr is a valid, writable buffer of ATTR_LEN bytes for the whole call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), ATTR_LEN) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r)
}

fn put32(a: &mut [u8; ATTR_LEN], off: usize, v: u32) {
    a[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}
fn put64(a: &mut [u8; ATTR_LEN], off: usize, v: u64) {
    a[off..off + 8].copy_from_slice(&v.to_ne_bytes());
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: bpf(2) returned a new descriptor that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// A new XSKMAP with room for every endpoint index and the board key.
pub fn create_xskmap() -> io::Result<OwnedFd> {
    let mut a = [0u8; ATTR_LEN];
    put32(&mut a, 0, BPF_MAP_TYPE_XSKMAP);
    put32(&mut a, 4, 4); // key: u32
    put32(&mut a, 8, 4); // value: the XSK descriptor
    put32(&mut a, 12, MAP_ENTRIES);
    bpf(BPF_MAP_CREATE, &mut a).map(owned)
}

/// Registers the XSK `xsk` under `key`.
pub fn map_set(map: RawFd, key: u32, xsk: RawFd) -> io::Result<()> {
    let value = xsk as u32;
    let mut a = [0u8; ATTR_LEN];
    put32(&mut a, 0, map as u32);
    put64(&mut a, 8, &key as *const u32 as u64);
    put64(&mut a, 16, &value as *const u32 as u64);
    bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(drop)
}

/// Removes the socket registered under `key` (a missing entry is not an error).
pub fn map_clear(map: RawFd, key: u32) -> io::Result<()> {
    let mut a = [0u8; ATTR_LEN];
    put32(&mut a, 0, map as u32);
    put64(&mut a, 8, &key as *const u32 as u64);
    match bpf(BPF_MAP_DELETE_ELEM, &mut a) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        r => r.map(drop),
    }
}

/// Loads the steering program for `ethertype` bound to `map`. On a verifier refusal
/// the error carries the verifier's log.
pub fn load_program(map: RawFd, ethertype: u16) -> io::Result<OwnedFd> {
    let insns = program(map, ethertype);
    let license = c"Dual MIT/GPL";
    let mut log = vec![0u8; 64 * 1024];
    let mut a = [0u8; ATTR_LEN];
    put32(&mut a, 0, BPF_PROG_TYPE_XDP);
    put32(&mut a, 4, insns.len() as u32);
    put64(&mut a, 8, insns.as_ptr() as u64);
    put64(&mut a, 16, license.as_ptr() as u64);
    a[48..48 + 7].copy_from_slice(b"omx_xdp");
    put32(&mut a, 68, BPF_XDP);
    match bpf(BPF_PROG_LOAD, &mut a) {
        Ok(fd) => Ok(owned(fd)),
        Err(e)
            if e.raw_os_error() == Some(libc::EACCES) || e.raw_os_error() == Some(libc::EINVAL) =>
        {
            // Load again with the log on, to say why.
            put32(&mut a, 24, 1);
            put32(&mut a, 28, log.len() as u32);
            put64(&mut a, 32, log.as_mut_ptr() as u64);
            let _ = bpf(BPF_PROG_LOAD, &mut a).map(owned);
            let end = log.iter().position(|&b| b == 0).unwrap_or(0);
            Err(io::Error::new(
                e.kind(),
                format!(
                    "XDP program refused ({e}): {}",
                    String::from_utf8_lossy(&log[..end])
                ),
            ))
        }
        Err(e) => Err(e),
    }
}

/// Attaches `prog` to interface `ifindex` through a BPF link (`flags`: native or
/// generic mode). The program stays attached exactly as long as the link descriptor
/// is open: closing it (or the process ending) detaches it.
pub fn attach(prog: &OwnedFd, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut a = [0u8; ATTR_LEN];
    put32(&mut a, 0, prog.as_raw_fd() as u32);
    put32(&mut a, 4, ifindex);
    put32(&mut a, 8, BPF_XDP);
    put32(&mut a, 12, flags);
    bpf(BPF_LINK_CREATE, &mut a).map(owned)
}

// eBPF encoding (uapi/linux/bpf_common.h, bpf.h).
const LDX_MEM_W: u8 = 0x61;
const LDX_MEM_H: u8 = 0x69;
const LDX_MEM_B: u8 = 0x71;
const LD_IMM64: u8 = 0x18;
const MOV64_X: u8 = 0xbf;
const MOV64_K: u8 = 0xb7;
const ADD64_K: u8 = 0x07;
const AND64_K: u8 = 0x57;
const XOR64_K: u8 = 0xa7;
const JA: u8 = 0x05;
const JEQ_K: u8 = 0x15;
const JNE_K: u8 = 0x55;
const JGT_K: u8 = 0x25;
const JLT_K: u8 = 0xa5;
const JGT_X: u8 = 0x2d;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    Pass,
    Board,
    Common,
    NackLib,
    Magic,
    Redirect,
}

/// A tiny assembler: instructions as `u64`s (little-endian `struct bpf_insn`), jumps
/// to labels patched at the end.
#[derive(Default)]
struct Asm {
    insns: Vec<u64>,
    fixups: Vec<(usize, Label)>,
    labels: Vec<(Label, usize)>,
}

impl Asm {
    fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        let regs = (dst & 0xf) | (src << 4);
        self.insns.push(
            code as u64
                | (regs as u64) << 8
                | (off as u16 as u64) << 16
                | (imm as u32 as u64) << 32,
        );
    }
    fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: Label) {
        self.fixups.push((self.insns.len(), to));
        self.op(code, dst, src, 0, imm);
    }
    fn label(&mut self, l: Label) {
        self.labels.push((l, self.insns.len()));
    }
    /// `if data + end > data_end goto pass` (r2 = data, r3 = data_end, r4 scratch):
    /// the verifier's proof that a load of the bytes before `end` stays in the frame.
    fn need(&mut self, end: usize) {
        self.op(MOV64_X, 4, 2, 0, 0);
        self.op(ADD64_K, 4, 0, 0, end as i32);
        self.jump(JGT_X, 4, 3, 0, Label::Pass);
    }
    fn finish(mut self) -> Vec<u64> {
        for (at, to) in std::mem::take(&mut self.fixups) {
            let target = self.labels.iter().find(|l| l.0 == to).expect("label").1;
            let off = (target as i64 - at as i64 - 1) as i16 as u16 as u64;
            self.insns[at] = (self.insns[at] & !(0xffff << 16)) | off << 16;
        }
        self.insns
    }
}

/// The steering program (see the module comment).
fn program(map: RawFd, ethertype: u16) -> Vec<u64> {
    let flags = (LATENCY_FLAG | CHECKSUM_FLAG) as i32;
    let mut a = Asm::default();
    a.op(LDX_MEM_W, 2, 1, 0, 0); // r2 = ctx->data
    a.op(LDX_MEM_W, 3, 1, 4, 0); // r3 = ctx->data_end
    a.need(TYPE_OFFSET + 1);
    a.op(LDX_MEM_H, 4, 2, ETHERTYPE_OFFSET as i16, 0);
    // A half-word load reads the big-endian EtherType in host (little-endian) order.
    let wire = u16::from_ne_bytes(ethertype.to_be_bytes());
    a.jump(JNE_K, 4, 0, wire as i32, Label::Pass);
    a.op(LDX_MEM_B, 5, 2, TYPE_OFFSET as i16, 0);
    a.op(AND64_K, 5, 0, 0, !flags & 0xff);
    for t in BOARD_TYPES {
        a.jump(JEQ_K, 5, 0, t as i32, Label::Board);
    }
    a.jump(JEQ_K, 5, 0, TYPE_PULL_REPLY as i32, Label::Magic);
    a.jump(JEQ_K, 5, 0, TYPE_NACK_MCP as i32, Label::Magic);
    a.jump(JEQ_K, 5, 0, TYPE_NACK_LIB as i32, Label::NackLib);
    a.jump(JEQ_K, 5, 0, TYPE_BUNDLE as i32, Label::Common);
    a.jump(JGT_K, 5, 0, *ENDPOINT_TYPES.end() as i32, Label::Pass);
    a.jump(JLT_K, 5, 0, *ENDPOINT_TYPES.start() as i32, Label::Pass);
    a.label(Label::Common);
    a.need(DST_ENDPOINT_OFFSET + 1);
    a.op(LDX_MEM_B, 2, 2, DST_ENDPOINT_OFFSET as i16, 0);
    a.jump(JA, 0, 0, 0, Label::Redirect);
    a.label(Label::NackLib);
    a.need(NACK_LIB_DST_ENDPOINT_OFFSET + 1);
    a.op(LDX_MEM_B, 2, 2, NACK_LIB_DST_ENDPOINT_OFFSET as i16, 0);
    a.jump(JA, 0, 0, 0, Label::Redirect);
    a.label(Label::Magic);
    a.need(MAGIC_ENDPOINT_OFFSET + 1);
    a.op(LDX_MEM_B, 2, 2, MAGIC_ENDPOINT_OFFSET as i16, 0);
    a.op(XOR64_K, 2, 0, 0, MAGIC_ENDPOINT_XOR as i32);
    a.jump(JA, 0, 0, 0, Label::Redirect);
    a.label(Label::Board);
    a.op(MOV64_K, 2, 0, 0, BOARD_KEY as i32);
    a.label(Label::Redirect);
    // return bpf_redirect_map(&xskmap, key, XDP_PASS)
    a.op(LD_IMM64, 1, BPF_PSEUDO_MAP_FD, 0, map);
    a.op(0, 0, 0, 0, 0);
    a.op(MOV64_K, 3, 0, 0, XDP_PASS);
    a.op(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP);
    a.op(EXIT, 0, 0, 0, 0);
    a.label(Label::Pass);
    a.op(MOV64_K, 0, 0, 0, XDP_PASS);
    a.op(EXIT, 0, 0, 0, 0);
    a.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_their_labels() {
        let p = program(3, 0x86df);
        // The last two instructions are `r0 = XDP_PASS; exit`; the first jump (the
        // length check) must target the first of them.
        let pass = p.len() - 2;
        let first_jump = 4;
        let off = ((p[first_jump] >> 16) & 0xffff) as u16 as i16 as i64;
        assert_eq!(p[first_jump] & 0xff, JGT_X as u64);
        assert_eq!(first_jump as i64 + 1 + off, pass as i64);
        assert_eq!(p[pass] & 0xff, MOV64_K as u64);
        assert_eq!(p[pass] >> 32, XDP_PASS as u64);
    }
}
