//! Asynchronous copies for applications (`omx_memcpy_async`, `omx_memcpy_test`,
//! `omx_memcpy_wait` of `mx_extensions.h`), usable without any endpoint.
//!
//! A copy gets a cookie: the process's copies are numbered from 1 in the order they
//! were posted and complete in that order, so cookie `k` is done once `k` copies
//! completed. They run on the host's copy service when one answers
//! (`OMX_COPY_SERVICE`, see [`crate::copy_service`]), otherwise on the process's own
//! copy thread ([`crate::copy::process_thread`], shared with receive offload).

use crate::copy::{process_thread, Completions, CopyBackend, CopyJob, CopyThread};
use crate::copy_service::client::ServiceClient;
use std::sync::{Arc, Mutex, OnceLock};

/// Why a copy was refused or failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemcpyError {
    /// A null address with a non-zero length.
    Null,
    /// A range wraps around the end of the address space.
    Wraps,
    /// Source and destination overlap (use a synchronous `memmove`).
    Overlap,
    /// The cookie was never given out (0, or beyond the last copy posted).
    UnknownCookie,
    /// The copy service could not read or write the memory (bad address, or a
    /// process this one may not access).
    Fault,
    /// No copy engine could be started.
    NoEngine,
}

impl std::fmt::Display for MemcpyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MemcpyError::Null => "null address with a non-zero length",
            MemcpyError::Wraps => "range wraps around the address space",
            MemcpyError::Overlap => "source and destination overlap",
            MemcpyError::UnknownCookie => "cookie was never given out",
            MemcpyError::Fault => "the copy service could not access the memory",
            MemcpyError::NoEngine => "no copy engine could be started",
        })
    }
}

/// Checks the arguments of a copy of `len` bytes from `src` to `dst`.
pub fn check(dst: usize, src: usize, len: usize) -> Result<(), MemcpyError> {
    if len == 0 {
        return Ok(());
    }
    if dst == 0 || src == 0 {
        return Err(MemcpyError::Null);
    }
    let (Some(dst_end), Some(src_end)) = (dst.checked_add(len), src.checked_add(len)) else {
        return Err(MemcpyError::Wraps);
    };
    if dst < src_end && src < dst_end {
        return Err(MemcpyError::Overlap);
    }
    Ok(())
}

/// Where the process's copies run.
enum Engine {
    Service(ServiceClient),
    Thread {
        thread: Arc<CopyThread>,
        done: Arc<Completions>,
        /// Copies posted; the lock keeps cookie order equal to queue order.
        posted: Mutex<u64>,
    },
}

fn engine() -> Result<&'static Engine, MemcpyError> {
    static ENGINE: OnceLock<Option<Engine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            if let Some(c) = ServiceClient::connect_default() {
                return Some(Engine::Service(c));
            }
            let cpu =
                crate::config::settings::text("OMX_COPY_CPU").and_then(|v| v.trim().parse().ok());
            process_thread(cpu).map(|thread| Engine::Thread {
                thread,
                done: Arc::new(Completions::default()),
                posted: Mutex::new(0),
            })
        })
        .as_ref()
        .ok_or(MemcpyError::NoEngine)
}

/// Which engine serves this process's copies: "service" or "thread".
pub fn engine_name() -> Result<&'static str, MemcpyError> {
    Ok(match engine()? {
        Engine::Service(_) => "service",
        Engine::Thread { .. } => "thread",
    })
}

/// Posts a copy of `len` bytes from `src` to `dst` and returns its cookie. The caller
/// keeps both ranges valid, and does not touch the destination, until the cookie is
/// done. Waits while the engine's queue is full.
pub fn post(dst: usize, src: usize, len: usize) -> Result<u64, MemcpyError> {
    check(dst, src, len)?;
    match engine()? {
        Engine::Service(c) => c.post(dst, src, len),
        Engine::Thread {
            thread,
            done,
            posted,
        } => {
            let mut n = posted.lock().unwrap_or_else(|e| e.into_inner());
            let mut job = CopyJob::Memory { src, dst, len };
            loop {
                match thread.submit(done, job) {
                    Ok(()) => break,
                    Err(j) => {
                        job = j;
                        std::thread::yield_now();
                    }
                }
            }
            *n += 1;
            Ok(*n)
        }
    }
}

/// Whether the copy of `cookie` is done (`Err(Fault)` if it failed).
pub fn test(cookie: u64) -> Result<bool, MemcpyError> {
    match engine()? {
        Engine::Service(c) => c.test(cookie),
        Engine::Thread { done, posted, .. } => {
            if cookie == 0 || cookie > *posted.lock().unwrap_or_else(|e| e.into_inner()) {
                return Err(MemcpyError::UnknownCookie);
            }
            Ok(done.load() >= cookie)
        }
    }
}

/// Waits until the copy of `cookie` is done.
pub fn wait(cookie: u64) -> Result<(), MemcpyError> {
    let mut spins = 0u32;
    while !test(cookie)? {
        // A copy of a few KiB finishes within the spin; a long one gives the CPU to
        // the engine (on two cores, often the one sharing it).
        if spins < 2000 {
            spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked() {
        assert_eq!(check(0, 0, 0), Ok(()));
        assert_eq!(check(0, 4096, 1), Err(MemcpyError::Null));
        assert_eq!(check(usize::MAX - 1, 4096, 4), Err(MemcpyError::Wraps));
        assert_eq!(check(4096, 4100, 8), Err(MemcpyError::Overlap));
        assert_eq!(check(4100, 4096, 8), Err(MemcpyError::Overlap));
        assert_eq!(
            check(4096, 4104, 8),
            Ok(()),
            "adjacent ranges do not overlap"
        );
    }
}
