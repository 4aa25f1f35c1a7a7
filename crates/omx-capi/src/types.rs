//! C layouts of the MX ABI (checked against `include/myriexpress.h` by the C tests).

use std::ffi::{c_char, c_void};

pub type MxReturn = u32;

pub const MX_SUCCESS: MxReturn = 0;
pub const MX_BAD_BAD_BAD: MxReturn = 1;
pub const MX_ALREADY_INITIALIZED: MxReturn = 3;
pub const MX_NOT_INITIALIZED: MxReturn = 4;
pub const MX_BOARD_UNKNOWN: MxReturn = 8;
pub const MX_BAD_ENDPOINT: MxReturn = 9;
pub const MX_BAD_SEG_LIST: MxReturn = 10;
pub const MX_BAD_SEG_CNT: MxReturn = 12;
pub const MX_BAD_REQUEST: MxReturn = 13;
pub const MX_BAD_MATCH_MASK: MxReturn = 14;
pub const MX_NO_RESOURCES: MxReturn = 15;
pub const MX_BUSY: MxReturn = 20;
pub const MX_BAD_INFO_KEY: MxReturn = 21;
pub const MX_BAD_INFO_VAL: MxReturn = 22;
pub const MX_BAD_PARAM_LIST: MxReturn = 24;
pub const MX_BAD_PARAM_NAME: MxReturn = 25;
pub const MX_BAD_PARAM_VAL: MxReturn = 26;
pub const MX_HOST_NOT_FOUND: MxReturn = 28;
pub const MX_TIMEOUT: MxReturn = 30;
pub const MX_BAD_ENDPOINT_ID: MxReturn = 32;
pub const MX_CONNECTION_FAILED: MxReturn = 33;
pub const MX_BAD_CONNECTION_KEY: MxReturn = 34;
pub const MX_BAD_INFO_LENGTH: MxReturn = 35;
pub const MX_NIC_NOT_FOUND: MxReturn = 36;
pub const MX_BAD_LIB_VERSION: MxReturn = 38;
pub const MX_CANCEL_NOT_SUPPORTED: MxReturn = 40;
pub const MX_CLOSE_IN_HANDLER: MxReturn = 41;
pub const MX_BAD_MATCHING_FOR_CONTEXT_ID_MASK: MxReturn = 42;

pub const MX_INFINITE: u32 = 0;
pub const MX_ANY_NIC: u32 = 0xffff_ffff;
pub const MX_ANY_ENDPOINT: u32 = 0xffff_ffff;
pub const MX_MAX_SEGMENTS: u32 = 256;
pub const MX_MAX_HOSTNAME_LEN: usize = 80;
pub const MX_MAX_STR_LEN: usize = 128;

pub const MX_PARAM_ERROR_HANDLER: u32 = 0;
pub const MX_PARAM_UNEXP_QUEUE_MAX: u32 = 1;
pub const MX_PARAM_CONTEXT_ID: u32 = 2;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MxEndpointAddr {
    pub stuff: [u64; 2],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct MxSegment {
    pub ptr: *mut c_void,
    pub len: u32,
}

/// `omx_typed_segment_t` (mx_extensions.h): a segment of any kind.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct OmxTypedSegment {
    pub kind: u32,
    pub fd: i32,
    pub pid: u32,
    pub reserved: u32,
    pub addr: u64,
    pub offset: u64,
    pub length: u64,
}

pub const OMX_SEG_MEMORY: u32 = 0;
pub const OMX_SEG_FILE: u32 = 1;
pub const OMX_SEG_PROCESS: u32 = 2;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct MxStatus {
    pub code: u32,
    pub source: MxEndpointAddr,
    pub match_info: u64,
    pub msg_length: u32,
    pub xfer_length: u32,
    pub context: *mut c_void,
}

pub type MxErrorHandler = Option<unsafe extern "C" fn(*mut c_char, MxReturn) -> MxReturn>;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct MxContextId {
    pub bits: u8,
    pub shift: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union MxParamVal {
    pub error_handler: MxErrorHandler,
    pub unexp_queue_max: u32,
    pub context_id: MxContextId,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct MxParam {
    pub key: u32,
    pub val: MxParamVal,
}
