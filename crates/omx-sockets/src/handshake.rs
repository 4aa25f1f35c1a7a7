//! What the two ends say to each other to move a TCP connection onto omx (SMC-R-like,
//! see docs/SOCKETS.md): the client's SYN carries its omx address in an IPv4 option, the
//! server reads it back from the saved SYN and answers with a hello as the first bytes
//! of its stream. Pure encoding and parsing, so it is tested without a network.

use omx_proto::NicId;

/// IPv4 option number 30: "experimental" (RFC 4727), copied-flag and class 0.
pub const IP_OPTION_KIND: u8 = 30;
const IP_OPTION_TAG: u8 = b'O';
const VERSION: u8 = 1;
/// kind, length, tag, version, nic (6), endpoint (1), connection id (4).
pub const IP_OPTION_LEN: usize = 15;

/// First bytes of the server's stream when it carries the connection on omx.
pub const HELLO_MAGIC: &[u8; 8] = b"OMXSOCK1";
/// Magic, nic id (8), endpoint (1), connection id (4).
pub const HELLO_LEN: usize = 21;

/// One end of a carried connection: its omx endpoint and its connection id there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OmxAddr {
    pub nic: NicId,
    pub endpoint: u8,
    pub conn: u32,
}

pub fn encode_ip_option(a: OmxAddr) -> [u8; IP_OPTION_LEN] {
    let mut o = [0u8; IP_OPTION_LEN];
    o[0] = IP_OPTION_KIND;
    o[1] = IP_OPTION_LEN as u8;
    o[2] = IP_OPTION_TAG;
    o[3] = VERSION;
    o[4..10].copy_from_slice(&a.nic.to_be_bytes()[2..]);
    o[10] = a.endpoint;
    o[11..15].copy_from_slice(&a.conn.to_be_bytes());
    o
}

/// The client's address from a saved SYN (IPv4 header onwards), if it carries ours.
pub fn parse_saved_syn(syn: &[u8]) -> Option<OmxAddr> {
    if syn.len() < 20 || syn[0] >> 4 != 4 {
        return None;
    }
    let header_len = ((syn[0] & 0x0f) as usize) * 4;
    let mut opts = syn.get(20..header_len)?;
    while let [kind, rest @ ..] = opts {
        match *kind {
            0 => return None,
            1 => opts = rest,
            _ => {
                let len = *rest.first()? as usize;
                if len < 2 || len > opts.len() {
                    return None;
                }
                let o = &opts[..len];
                if o[0] == IP_OPTION_KIND
                    && len == IP_OPTION_LEN
                    && o[2] == IP_OPTION_TAG
                    && o[3] == VERSION
                {
                    let mut nic = [0u8; 8];
                    nic[2..].copy_from_slice(&o[4..10]);
                    return Some(OmxAddr {
                        nic: u64::from_be_bytes(nic),
                        endpoint: o[10],
                        conn: u32::from_be_bytes(o[11..15].try_into().ok()?),
                    });
                }
                opts = &opts[len..];
            }
        }
    }
    None
}

pub fn encode_hello(a: OmxAddr) -> [u8; HELLO_LEN] {
    let mut h = [0u8; HELLO_LEN];
    h[..8].copy_from_slice(HELLO_MAGIC);
    h[8..16].copy_from_slice(&a.nic.to_be_bytes());
    h[16] = a.endpoint;
    h[17..21].copy_from_slice(&a.conn.to_be_bytes());
    h
}

/// What the first bytes of a server's stream say.
#[derive(Debug, PartialEq, Eq)]
pub enum HelloCheck {
    /// Not a hello: the connection stays on TCP.
    Plain,
    /// A prefix of a hello so far: wait for more bytes.
    Partial,
    Hello(OmxAddr),
}

pub fn check_hello(bytes: &[u8]) -> HelloCheck {
    let n = bytes.len().min(HELLO_MAGIC.len());
    if bytes[..n] != HELLO_MAGIC[..n] {
        return HelloCheck::Plain;
    }
    if bytes.len() < HELLO_LEN {
        return HelloCheck::Partial;
    }
    HelloCheck::Hello(OmxAddr {
        nic: u64::from_be_bytes(bytes[8..16].try_into().expect("8 bytes")),
        endpoint: bytes[16],
        conn: u32::from_be_bytes(bytes[17..21].try_into().expect("4 bytes")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: OmxAddr = OmxAddr {
        nic: 0x0200_0000_1202,
        endpoint: 7,
        conn: 0xdead_beef,
    };

    fn syn_with_options(opts: &[u8]) -> Vec<u8> {
        let mut padded = opts.to_vec();
        while !padded.len().is_multiple_of(4) {
            padded.push(0);
        }
        let mut syn = vec![0u8; 20];
        syn[0] = 0x40 | ((20 + padded.len()) / 4) as u8;
        syn.extend_from_slice(&padded);
        syn.extend_from_slice(&[0u8; 20]); // TCP header
        syn
    }

    #[test]
    fn ip_option_round_trips_through_a_syn() {
        let syn = syn_with_options(&encode_ip_option(A));
        assert_eq!(parse_saved_syn(&syn), Some(A));
        // After NOPs and another option too.
        let mut opts = vec![1, 1, 7, 3, 4];
        opts.extend_from_slice(&encode_ip_option(A));
        assert_eq!(parse_saved_syn(&syn_with_options(&opts)), Some(A));
    }

    #[test]
    fn syns_without_our_option_or_malformed_give_none() {
        assert_eq!(parse_saved_syn(&syn_with_options(&[])), None);
        assert_eq!(parse_saved_syn(&syn_with_options(&[7, 3, 4])), None);
        let mut other = encode_ip_option(A);
        other[2] = b'X';
        assert_eq!(parse_saved_syn(&syn_with_options(&other)), None);
        // A length running past the header, zero length, truncated, IPv6.
        assert_eq!(parse_saved_syn(&syn_with_options(&[30, 40])), None);
        assert_eq!(parse_saved_syn(&syn_with_options(&[30, 0, 1, 1])), None);
        assert_eq!(parse_saved_syn(&[0x46; 10]), None);
        assert_eq!(parse_saved_syn(&[0x60; 60]), None);
    }

    #[test]
    fn hello_is_recognised_partial_or_plain() {
        let h = encode_hello(A);
        assert_eq!(check_hello(&h), HelloCheck::Hello(A));
        assert_eq!(check_hello(&h[..3]), HelloCheck::Partial);
        assert_eq!(check_hello(&h[..HELLO_LEN - 1]), HelloCheck::Partial);
        assert_eq!(check_hello(b"HTTP/1.0 200 OK"), HelloCheck::Plain);
        assert_eq!(check_hello(b"OMXSOCK2xxxxxxxxxxxxxxxxx"), HelloCheck::Plain);
        assert_eq!(check_hello(b"SSH-2.0"), HelloCheck::Plain);
    }
}
