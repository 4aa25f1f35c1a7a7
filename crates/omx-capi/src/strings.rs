//! Texts of return and status codes (our own wording).

use crate::types::MxReturn;
use std::ffi::c_char;

macro_rules! texts {
    ($($n:expr => $t:expr),* $(,)?) => {
        |code: u32| -> &'static [u8] { match code { $($n => concat!($t, "\0").as_bytes(),)* _ => b"Unknown code\0" } }
    };
}

#[no_mangle]
pub extern "C" fn mx_strerror(code: MxReturn) -> *const c_char {
    let f = texts! {
        0 => "Success", 1 => "Internal error", 2 => "Failure", 3 => "Already initialized",
        4 => "Not initialized", 5 => "No device", 6 => "No driver", 7 => "Permission denied",
        8 => "Board unknown", 9 => "Bad endpoint", 10 => "Bad segment list",
        11 => "Bad segment memory", 12 => "Bad segment count", 13 => "Bad request",
        14 => "Bad match mask", 15 => "No resources", 16 => "Bad address list",
        17 => "Bad address count", 18 => "Bad root", 19 => "Not completed", 20 => "Busy",
        21 => "Bad info key", 22 => "Bad info value", 23 => "Bad NIC",
        24 => "Bad parameter list", 25 => "Bad parameter name", 26 => "Bad parameter value",
        27 => "Bad hostname arguments", 28 => "Host not found", 29 => "Request pending",
        30 => "Timeout", 31 => "No match", 32 => "Bad endpoint id", 33 => "Connection failed",
        34 => "Bad connection key", 35 => "Bad info length", 36 => "NIC not found",
        37 => "Bad kernel version", 38 => "Bad library version", 39 => "NIC dead",
        40 => "Cancel not supported", 41 => "Close in handler",
        42 => "Bad matching for context id mask", 43 => "Not supported with context id",
    };
    f(code).as_ptr() as *const c_char
}

#[no_mangle]
pub extern "C" fn mx_strstatus(code: u32) -> *const c_char {
    let f = texts! {
        0 => "Success", 1 => "Pending", 2 => "Buffered", 3 => "Rejected", 4 => "Timeout",
        5 => "Message truncated", 6 => "Cancelled", 7 => "Remote endpoint unknown",
        8 => "Remote endpoint closed", 9 => "Remote endpoint unreachable",
        10 => "Remote endpoint bad session", 11 => "Remote endpoint bad connection key",
        12 => "Remote endpoint bad id", 13 => "Remote RDMA window bad id",
        14 => "Message aborted", 15 => "Event queue full", 16 => "No resources",
    };
    f(code).as_ptr() as *const c_char
}

/// Text of a native return or status code (`omx_return_t`).
#[no_mangle]
pub extern "C" fn omx_strerror(code: u32) -> *const c_char {
    let f = texts! {
        0 => "Success", 1 => "Internal error", 3 => "Already initialized",
        4 => "Not initialized", 5 => "No device file", 6 => "No driver",
        7 => "Access denied", 8 => "Board not found", 9 => "Bad endpoint",
        12 => "Bad segment count", 13 => "Bad request", 14 => "Bad match mask",
        15 => "No resources", 20 => "Busy", 21 => "Bad info key", 22 => "Bad info address",
        24 => "Bad endpoint parameter list", 25 => "Bad endpoint parameter key",
        26 => "Bad endpoint parameter value", 28 => "Peer not found", 30 => "Timeout",
        32 => "Remote endpoint bad id", 33 => "Remote endpoint closed",
        34 => "Remote endpoint bad connection key", 35 => "Bad info length",
        36 => "NIC id not found", 37 => "Bad kernel ABI", 38 => "Bad library ABI",
        42 => "Bad matching for context id mask", 90 => "Cancelled",
        91 => "Remote RDMA window bad id", 92 => "Remote endpoint unreachable",
        93 => "Remote endpoint bad session", 94 => "Message aborted",
        95 => "Message truncated", 96 => "Not supported in handler",
        97 => "No system resources", 99 => "Not implemented",
    };
    f(code).as_ptr() as *const c_char
}
