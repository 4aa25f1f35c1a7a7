//! Decode and encode errors, and the drop counters they map to (spec §12).

use core::fmt;

use crate::packet::PacketType;

/// Why a received frame was rejected. Each variant corresponds to one drop
/// counter of the original driver (see [`DecodeError::drop_reason`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Frame shorter than the common header plus type byte, or than the
    /// type's body header ("bad header data length"). Lengths are whole-frame
    /// byte counts.
    TooShort { need: usize, have: usize },
    /// EtherType differs from the configured one.
    WrongEtherType(u16),
    /// Type byte is not a defined packet type (includes NONE=0 and MAX=255).
    UnknownType(u8),
    /// Defined type without an implementation ("invalid type").
    UnsupportedType(PacketType),
    /// A declared length is outside the type's limits ("bad data length").
    BadDataLength,
    /// The declared payload extends past the end of the frame ("bad skb
    /// length"). Lengths are whole-frame byte counts.
    PayloadTruncated { need: usize, have: usize },
    /// Any other out-of-range field; the string names the rule.
    BadField(&'static str),
    /// The frame carries [`crate::CHECKSUM_FLAG`] and its trailer does not match its
    /// bytes (or is missing): corrupted on the way.
    BadChecksum,
}

/// Drop counter a rejected frame is accounted under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    BadHeaderDataLen,
    BadDataLen,
    BadSkbLen,
    UnknownType,
    InvalidType,
    BadField,
    WrongEtherType,
    Checksum,
}

impl DecodeError {
    /// Counter to bump for this rejection.
    pub fn drop_reason(&self) -> DropReason {
        match self {
            DecodeError::TooShort { .. } => DropReason::BadHeaderDataLen,
            DecodeError::WrongEtherType(_) => DropReason::WrongEtherType,
            DecodeError::UnknownType(_) => DropReason::UnknownType,
            DecodeError::UnsupportedType(_) => DropReason::InvalidType,
            DecodeError::BadDataLength => DropReason::BadDataLen,
            DecodeError::PayloadTruncated { .. } => DropReason::BadSkbLen,
            DecodeError::BadField(_) => DropReason::BadField,
            DecodeError::BadChecksum => DropReason::Checksum,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::TooShort { need, have } => {
                write!(
                    f,
                    "frame too short for its header: need {need} bytes, have {have}"
                )
            }
            DecodeError::WrongEtherType(t) => write!(f, "unexpected EtherType {t:#06x}"),
            DecodeError::UnknownType(t) => write!(f, "unknown packet type {t}"),
            DecodeError::UnsupportedType(t) => write!(f, "unsupported packet type {t:?}"),
            DecodeError::BadDataLength => f.write_str("declared data length out of range"),
            DecodeError::PayloadTruncated { need, have } => {
                write!(f, "payload truncated: need {need} bytes, have {have}")
            }
            DecodeError::BadField(what) => write!(f, "invalid field: {what}"),
            DecodeError::BadChecksum => f.write_str("checksum mismatch"),
        }
    }
}

impl std::error::Error for DecodeError {}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DropReason::BadHeaderDataLen => "bad header data length",
            DropReason::BadDataLen => "bad data length",
            DropReason::BadSkbLen => "bad skb length",
            DropReason::UnknownType => "unknown type",
            DropReason::InvalidType => "invalid type",
            DropReason::BadField => "bad field",
            DropReason::WrongEtherType => "wrong ethertype",
            DropReason::Checksum => "checksum mismatch",
        })
    }
}

/// Why a packet could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// Output slice smaller than the header.
    BufferTooSmall { need: usize, have: usize },
    /// Payload length differs from the packet's declared length field.
    PayloadLength { declared: usize, actual: usize },
    /// A field value does not fit the configured layout; names the field.
    FieldRange(&'static str),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::BufferTooSmall { need, have } => {
                write!(f, "output buffer too small: need {need} bytes, have {have}")
            }
            EncodeError::PayloadLength { declared, actual } => {
                write!(
                    f,
                    "payload is {actual} bytes but the header declares {declared}"
                )
            }
            EncodeError::FieldRange(what) => write!(f, "field does not fit the layout: {what}"),
        }
    }
}

impl std::error::Error for EncodeError {}
