//! The transmit path: the engine's outputs executed (local pulls and messages, copies,
//! frames, bundled where they fit, looped back when addressed to ourselves) and flushed.

use super::{Core, EndpointInner, Error, RX_POOL_CHUNK};
use crate::copy::{run_job, CopyJob};
use crate::local::run_local_pull;
use crate::memory::{read_segments, MemRegistry, Segment};
use bytes::{Bytes, BytesMut};
use omx_proto::*;
use omx_transport::PacketSocket;

/// Smallest payload read by the kernel straight from user memory (a pull reply),
/// rather than copied into the send batch: below it the copy costs less than the extra
/// iovecs.
const GATHER_MIN: usize = 1024;

/// Queues one engine frame. A large pull reply is gathered: its payload goes from the
/// sender's memory to the kernel without a copy into the batch.
fn queue_transmit(sock: &mut PacketSocket, mem: &MemRegistry, t: &Transmit) {
    if let Payload::User {
        handle,
        offset,
        len,
    } = t.payload
    {
        let mut parts: [&[u8]; omx_transport::MAX_GATHER] = [&[]; omx_transport::MAX_GATHER];
        let gathered = (len as usize >= GATHER_MIN && t.frame_len() == t.content_len())
            .then(|| mem.gather(handle, offset as usize, len as usize, &mut parts))
            .flatten();
        if let Some(n) = gathered {
            let parts = &parts[..n];
            let pieces: [(*const u8, usize); omx_transport::MAX_GATHER] =
                std::array::from_fn(|i| {
                    parts
                        .get(i)
                        .map_or((std::ptr::null(), 0), |p| (p.as_ptr(), p.len()))
                });
            let tail = t.trailer_len();
            // SAFETY: the pieces lie in memory a send request lent to the engine, which
            // it holds until that request completes; completions reach the application
            // only after `drain` returns, and `drain` flushes every frame that reads
            // lent memory before returning (a flush sends or drops them all).
            let _ = unsafe {
                sock.queue_send_gathered(t.header().len(), &pieces[..n], tail, |head, trailer| {
                    head.copy_from_slice(t.header());
                    if !trailer.is_empty() {
                        let mut covered = [&[][..]; omx_transport::MAX_GATHER + 1];
                        covered[0] = t.header();
                        covered[1..=n].copy_from_slice(parts);
                        omx_wire::write_trailer(&covered[..=n], trailer);
                    }
                })
            };
            return;
        }
    }
    let _ = sock.queue_send(t.frame_len(), |buf| {
        t.write_to(buf, |h, off, out| mem.read(h, off as usize, out))
    });
}

/// Send-side state: captured eager data, send pacing.
pub(super) struct Outbound {
    /// Eager send data is captured into chunks of this pool (no allocation per message).
    capture_pool: BytesMut,
    /// When the application last posted a send: back-to-back sends are not flushed one
    /// by one, so they can share frames (the engine holds them for bundles) and system
    /// calls.
    pub(super) last_post: Time,
}

impl Outbound {
    pub(super) fn new() -> Outbound {
        Outbound {
            capture_pool: BytesMut::new(),
            last_post: 0,
        }
    }

    /// Copies a send's segments into the pool and returns them as shared bytes; a
    /// file or process segment that cannot be read fails the send, nothing sent.
    pub(super) fn capture(&mut self, segs: &[Segment], len: usize) -> Result<Bytes, Error> {
        let pool = &mut self.capture_pool;
        if pool.capacity() < len {
            pool.reserve(RX_POOL_CHUNK.max(len));
        }
        for s in segs.iter().filter(|s| !s.is_empty()) {
            if let Segment::Memory { ptr, len } = *s {
                // SAFETY: the caller lent these segments for the duration of the call.
                pool.extend_from_slice(unsafe { std::slice::from_raw_parts(ptr, len) });
                continue;
            }
            let start = pool.len();
            pool.resize(start + s.len(), 0);
            if let Err(e) = read_segments(std::slice::from_ref(s), &mut pool[start..]) {
                pool.clear();
                return Err(Error::Segment(e));
            }
        }
        Ok(pool.split().freeze())
    }

    /// Sends every frame queued on the sockets (frames the engine holds for bundles make
    /// its output non-empty, so the caller's next drain takes them first).
    pub(super) fn flush(&mut self, sock: &mut PacketSocket, stripes: &mut [PacketSocket]) {
        let _ = sock.flush();
        for s in stripes {
            let _ = s.flush();
        }
    }
}

impl EndpointInner {
    /// After posting a request: only the engine's outputs (frames, copies, completions),
    /// without polling the socket, which the next wait or test does.
    pub(super) fn post_drain(&self, core: &mut Core, now: Time, flush: bool) {
        if self.drain(core, now, flush) {
            self.wake.signal_sleepers(core.completions.filed());
        }
        core.timer_at = core
            .timer_at
            .min(core.engine.poll_timeout().unwrap_or(u64::MAX));
    }

    /// Executes copies, sends frames and collects completions until the engine is idle.
    /// Without `flush`, frames that may share a bundle stay in the engine for the next
    /// drain (back-to-back sends), and the socket is not flushed.
    pub(super) fn drain(&self, core: &mut Core, now: Time, flush: bool) -> bool {
        let mut completed = false;
        let Core {
            engine,
            sock,
            stripes,
            mem,
            completions,
            outbound,
            inbound,
            local,
            copier,
            faults,
            ..
        } = core;
        if let Some(sh) = local.as_mut().filter(|s| s.has_backlog()) {
            sh.flush(engine, mem, now);
        }
        let next = |e: &mut Engine| {
            if flush {
                e.poll()
            } else {
                e.poll_holding_bundles()
            }
        };
        loop {
            while let Some(out) = next(engine) {
                match out {
                    Output::LocalPull(p) => match local.as_mut() {
                        Some(sh) => sh.pull(engine, mem, now, p, copier),
                        None => {
                            let o = run_local_pull(mem, &p, std::process::id(), false, None);
                            engine.local_pull_done(now, p.id, o);
                        }
                    },
                    // Without a channel no partner is reached through shared memory.
                    Output::Local(m) => {
                        if let Some(sh) = local.as_mut() {
                            sh.send_one(m, mem);
                        }
                    }
                    Output::Copy(op) => {
                        // Only into memory: file and process segments are written here.
                        let dst = (op.report && copier.offloads(op.src.len(), op.msg_length))
                            .then(|| mem.ranges(op.dst, op.dst_offset as usize, op.src.len()))
                            .flatten();
                        if let Some(dst) = dst {
                            let dst = dst.into_iter().map(|(p, n)| (p as usize, n)).collect();
                            let job = CopyJob::Frame { src: op.src, dst };
                            if let Err(job) = copier.submit(op.id, job) {
                                // The engine is full: copy here (bounds the frames it holds).
                                run_job(job);
                                engine.copy_done(now, op.id);
                            }
                            continue;
                        }
                        mem.write(op.dst, op.dst_offset as usize, &op.src);
                        if op.report {
                            engine.copy_done(now, op.id);
                        }
                    }
                    Output::Atomic(job) => {
                        let old = mem.apply_atomic(&job);
                        engine.atomic_done(now, &job, old);
                    }
                    Output::Transmit(t) => {
                        if t.dst_mac() == self.board.iface.mac && !self.board.iface.loopback {
                            // A frame to ourselves never comes back from a real
                            // interface: loop it back in software for the next pass.
                            let mut f = Vec::with_capacity(t.frame_len());
                            let m = &*mem;
                            t.assemble(&mut f, |h, off, out| m.read(h, off as usize, out));
                            inbound.looped.push(Bytes::from(f));
                            continue;
                        }
                        if faults.as_mut().is_some_and(|f| f.drop_send()) {
                            continue;
                        }
                        // A striped pull or reply leaves from the board it names.
                        let out = match t.path {
                            0 => &mut *sock,
                            p => match stripes.get_mut(p as usize - 1) {
                                Some(s) => s,
                                None => continue,
                            },
                        };
                        queue_transmit(out, mem, &t);
                    }
                    Output::Completion(c) => {
                        completed |= completions.take_polled(c, engine, mem, copier, now);
                    }
                }
            }
            // Doorbells owed and messages that waited for room (writing them may
            // complete requests or queue more).
            if let Some(sh) = local.as_mut() {
                sh.flush(engine, mem, now);
            }
            let more = if flush {
                engine.has_output()
            } else {
                engine.has_unheld_output()
            };
            if !more {
                break;
            }
        }
        if flush {
            outbound.flush(sock, stripes);
        } else if sock.holds_lent() || stripes.iter().any(PacketSocket::holds_lent) {
            // Frames that read user memory leave before the lock is released, so the
            // memory cannot be handed back to the application (a completion, a
            // cancel, a failed send) while the kernel may still read it.
            outbound.flush(sock, stripes);
        }
        completed
    }
}
