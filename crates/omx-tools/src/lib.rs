//! Shared helpers of the omx tools.

use omx_proto::{mac_from_nic_id, NicId};
use omx_runtime::Runtime;
use std::sync::Arc;

pub fn fmt_mac(nic: NicId) -> String {
    let m = mac_from_nic_id(nic);
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// The runtime, or an error message and exit code -1 (255) as the original tools.
pub fn runtime_or_exit(tool: &str) -> Arc<Runtime> {
    match Runtime::global() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{tool}: failed to initialize ({e})");
            std::process::exit(255);
        }
    }
}
