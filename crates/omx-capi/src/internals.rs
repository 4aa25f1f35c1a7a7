//! The MX-internal probes some MPI configure scripts look for.

use crate::fail;
use crate::types::*;
use std::ffi::c_void;

/// Probe used by MPI configure scripts: nothing to open.
#[no_mangle]
pub extern "C" fn mx_open_board(_board: i32, handle: *mut i32) -> MxReturn {
    if !handle.is_null() {
        // SAFETY: the caller passed a writable handle.
        unsafe { *handle = 0 };
    }
    MX_SUCCESS
}

#[repr(C)]
pub struct MxMapperState {
    pub board_number: u32,
    pub mapper_mac: [u8; 6],
    pub iport: u16,
    pub map_version: u32,
    pub num_hosts: u32,
    pub network_configured: u32,
    pub routes_valid: u32,
    pub level: u32,
    pub flags: u32,
}

/// Discovery is dynamic and mapper-less: version 1, mapper 00:00:00:00:00:00.
#[no_mangle]
pub unsafe extern "C" fn mx__get_mapper_state(_handle: i32, state: *mut MxMapperState) -> MxReturn {
    if state.is_null() {
        return fail(None, MX_BAD_INFO_VAL, "null state");
    }
    (*state).map_version = 1;
    (*state).mapper_mac = [0; 6];
    MX_SUCCESS
}

/// omx keeps no registration cache: nothing to invalidate.
#[no_mangle]
pub extern "C" fn mx__regcache_clean(_ptr: *mut c_void, _len: usize) -> i32 {
    0
}
