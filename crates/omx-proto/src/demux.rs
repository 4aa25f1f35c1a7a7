//! Board-level demultiplexing: which local endpoint a received frame is for, read from
//! the fixed offsets the original documents for NIC hashing (type byte at 16, endpoint at
//! 17; pull replies and nacks carry it elsewhere).

use omx_wire::{PacketType, COMMON_HEADER_LEN, PULL_MAGIC_XOR};

/// What a board should do with a received frame before any endpoint sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Endpoint(u8),
    /// Discovery and raw frames, handled by the board itself.
    Board,
    /// Too short to tell, or of a type nobody handles: dropped (and counted by the board).
    Drop,
}

pub fn route(frame: &[u8]) -> Route {
    let Some(&ptype) = frame.get(COMMON_HEADER_LEN) else {
        return Route::Drop;
    };
    let at = |off: usize| frame.get(COMMON_HEADER_LEN + off).copied();
    let endpoint = match ptype {
        t if t == PacketType::Raw as u8
            || t == PacketType::HostQuery as u8
            || t == PacketType::HostReply as u8 =>
        {
            return Route::Board
        }
        t if t == PacketType::PullReply as u8 => at(15).map(|b| b ^ (PULL_MAGIC_XOR & 0xFF) as u8),
        t if t == PacketType::NackMcp as u8 => at(15).map(|b| b ^ (PULL_MAGIC_XOR & 0xFF) as u8),
        t if t == PacketType::NackLib as u8 => at(9),
        omx_wire::BUNDLE_TYPE => at(1),
        t if (PacketType::Truc as u8..=PacketType::Notify as u8).contains(&t) => at(1),
        _ => None,
    };
    endpoint.map_or(Route::Drop, Route::Endpoint)
}
