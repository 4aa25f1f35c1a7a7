//! The omx extension for asynchronous copies (`omx_memcpy_async` and friends of
//! mx_extensions.h): usable without mx_init or any endpoint, so errors are returned,
//! never given to the error handler.

use crate::types::*;
use omx_runtime::memcpy::{self, MemcpyError};
use std::ffi::c_void;

fn code(e: MemcpyError) -> MxReturn {
    match e {
        MemcpyError::NoEngine => MX_NO_RESOURCES,
        _ => MX_BAD_PARAM_VAL,
    }
}

/// Starts copying `len` bytes from `src` to `dst`; `*cookie` names the copy.
#[no_mangle]
pub unsafe extern "C" fn omx_memcpy_async(
    dst: *mut c_void,
    src: *const c_void,
    len: usize,
    cookie: *mut u64,
) -> MxReturn {
    if cookie.is_null() {
        return MX_BAD_PARAM_VAL;
    }
    match memcpy::post(dst as usize, src as usize, len) {
        Ok(c) => {
            // SAFETY: non-null, and the caller passes a writable cookie.
            unsafe { *cookie = c };
            MX_SUCCESS
        }
        Err(e) => code(e),
    }
}

/// `*done` = 1 when the copy of `cookie` is complete, else 0.
#[no_mangle]
pub unsafe extern "C" fn omx_memcpy_test(cookie: u64, done: *mut u32) -> MxReturn {
    if done.is_null() {
        return MX_BAD_PARAM_VAL;
    }
    match memcpy::test(cookie) {
        Ok(d) => {
            // SAFETY: non-null, and the caller passes a writable flag.
            unsafe { *done = d as u32 };
            MX_SUCCESS
        }
        Err(e) => code(e),
    }
}

/// Waits until the copy of `cookie` (and every earlier one) is complete.
#[no_mangle]
pub extern "C" fn omx_memcpy_wait(cookie: u64) -> MxReturn {
    memcpy::wait(cookie).map_or_else(code, |()| MX_SUCCESS)
}
