//! A file system over omx: `omxfsd` exports directories, `omxfs` mounts one with FUSE
//! (docs/FILES.md).

pub mod client;
pub mod export;
pub mod locks;
pub mod proto;
pub mod server;

use omx_runtime::{Endpoint, Runtime};

/// Opens an omxfs endpoint on `board` (the server's at a fixed index, a client's at
/// any free one).
pub fn open_endpoint(board: u32, index: Option<u8>) -> Result<Endpoint, String> {
    let rt = Runtime::global()?;
    if rt.boards.is_empty() {
        return Err("no omx board on this host".into());
    }
    Endpoint::open(&rt, board, index, proto::KEY)
        .map_err(|e| format!("cannot open an endpoint: {e}"))
}
