//! What the two ends say to each other to move a TCP connection onto omx (SMC-R-like,
//! see docs/SOCKETS.md): the client's SYN carries its omx address in an IP option (an
//! IPv4 option, or an IPv6 destination option), the server reads it back from the saved
//! SYN and answers with a hello as the first bytes of its stream. Pure encoding and
//! parsing, so it is tested without a network.

use omx_proto::NicId;

/// IPv4 option number 30: "experimental" (RFC 4727), copied-flag and class 0.
pub const IP_OPTION_KIND: u8 = 30;
/// IPv6 option type 0x1E: experimental (RFC 4727); its top bits 00 tell a node that
/// does not know it to skip it.
pub const IPV6_OPTION_TYPE: u8 = 0x1e;
const IP_OPTION_TAG: u8 = b'O';
const VERSION: u8 = 1;
/// The option's data, the same in both families: tag, version, nic (6), endpoint (1),
/// connection id (4).
const OPTION_DATA_LEN: usize = 13;
/// kind, length, then the data.
pub const IP_OPTION_LEN: usize = 2 + OPTION_DATA_LEN;
/// A destination-options header holding the option: next header, length, the
/// option, padded (PadN) to a multiple of 8 bytes.
pub const IPV6_DSTOPTS_LEN: usize = 24;
const IPV6_NEXT_HOP_BY_HOP: u8 = 0;
const IPV6_NEXT_ROUTING: u8 = 43;
const IPV6_NEXT_DSTOPTS: u8 = 60;
const IPV6_HEADER_LEN: usize = 40;

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

fn encode_option_data(a: OmxAddr) -> [u8; OPTION_DATA_LEN] {
    let mut d = [0u8; OPTION_DATA_LEN];
    d[0] = IP_OPTION_TAG;
    d[1] = VERSION;
    d[2..8].copy_from_slice(&a.nic.to_be_bytes()[2..]);
    d[8] = a.endpoint;
    d[9..13].copy_from_slice(&a.conn.to_be_bytes());
    d
}

fn decode_option_data(d: &[u8]) -> Option<OmxAddr> {
    if d.len() != OPTION_DATA_LEN || d[0] != IP_OPTION_TAG || d[1] != VERSION {
        return None;
    }
    let mut nic = [0u8; 8];
    nic[2..].copy_from_slice(&d[2..8]);
    Some(OmxAddr {
        nic: u64::from_be_bytes(nic),
        endpoint: d[8],
        conn: u32::from_be_bytes(d[9..13].try_into().ok()?),
    })
}

/// The IPv4 option (`IP_OPTIONS`) a client's SYN carries.
pub fn encode_ip_option(a: OmxAddr) -> [u8; IP_OPTION_LEN] {
    let mut o = [0u8; IP_OPTION_LEN];
    o[0] = IP_OPTION_KIND;
    o[1] = IP_OPTION_LEN as u8;
    o[2..].copy_from_slice(&encode_option_data(a));
    o
}

/// The IPv6 destination-options header (`IPV6_DSTOPTS`) a client's SYN carries; the
/// kernel fills in the next-header byte.
pub fn encode_ipv6_dstopts(a: OmxAddr) -> [u8; IPV6_DSTOPTS_LEN] {
    let mut h = [0u8; IPV6_DSTOPTS_LEN];
    h[1] = (IPV6_DSTOPTS_LEN / 8 - 1) as u8;
    h[2] = IPV6_OPTION_TYPE;
    h[3] = OPTION_DATA_LEN as u8;
    h[4..4 + OPTION_DATA_LEN].copy_from_slice(&encode_option_data(a));
    // PadN over the rest.
    let pad = 4 + OPTION_DATA_LEN;
    h[pad] = 1;
    h[pad + 1] = (IPV6_DSTOPTS_LEN - pad - 2) as u8;
    h
}

/// The client's address from a saved SYN (IP header onwards, IPv4 or IPv6), if it
/// carries ours.
pub fn parse_saved_syn(syn: &[u8]) -> Option<OmxAddr> {
    match syn.first()? >> 4 {
        4 => parse_ipv4_syn(syn),
        6 => parse_ipv6_syn(syn),
        _ => None,
    }
}

fn parse_ipv4_syn(syn: &[u8]) -> Option<OmxAddr> {
    if syn.len() < 20 {
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
                if *kind == IP_OPTION_KIND {
                    if let Some(a) = decode_option_data(&opts[2..len]) {
                        return Some(a);
                    }
                }
                opts = &opts[len..];
            }
        }
    }
    None
}

/// Walks the extension headers in front of TCP for a destination (or hop-by-hop)
/// option of ours.
fn parse_ipv6_syn(syn: &[u8]) -> Option<OmxAddr> {
    let mut next = *syn.get(6)?;
    let mut at = IPV6_HEADER_LEN;
    while matches!(
        next,
        IPV6_NEXT_HOP_BY_HOP | IPV6_NEXT_ROUTING | IPV6_NEXT_DSTOPTS
    ) {
        let header = syn.get(at..at + 2)?;
        let len = (header[1] as usize + 1) * 8;
        let ext = syn.get(at..at + len)?;
        if next != IPV6_NEXT_ROUTING {
            let mut opts = &ext[2..];
            while let [kind, rest @ ..] = opts {
                if *kind == 0 {
                    opts = rest; // Pad1
                    continue;
                }
                let data_len = *rest.first()? as usize;
                let data = rest.get(1..1 + data_len)?;
                if *kind == IPV6_OPTION_TYPE {
                    if let Some(a) = decode_option_data(data) {
                        return Some(a);
                    }
                }
                opts = &rest[1 + data_len..];
            }
        }
        next = ext[0];
        at += len;
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
        // A length running past the header, zero length, truncated, IPv6 without options.
        assert_eq!(parse_saved_syn(&syn_with_options(&[30, 40])), None);
        assert_eq!(parse_saved_syn(&syn_with_options(&[30, 0, 1, 1])), None);
        assert_eq!(parse_saved_syn(&[0x46; 10]), None);
        assert_eq!(parse_saved_syn(&[0x60; 60]), None);
        assert_eq!(parse_saved_syn(&[]), None);
    }

    /// An IPv6 SYN: the fixed header, then `ext` (a chain of extension headers, the
    /// first named by `first`), then a TCP header.
    fn ipv6_syn(first: u8, ext: &[u8]) -> Vec<u8> {
        let mut syn = vec![0u8; IPV6_HEADER_LEN];
        syn[0] = 0x60;
        syn[6] = first;
        syn.extend_from_slice(ext);
        syn.extend_from_slice(&[0u8; 20]);
        syn
    }

    #[test]
    fn ipv6_destination_option_round_trips_through_a_syn() {
        let mut d = encode_ipv6_dstopts(A);
        assert_eq!(d.len() % 8, 0);
        d[0] = 6; // the kernel's next header: TCP
        assert_eq!(parse_saved_syn(&ipv6_syn(IPV6_NEXT_DSTOPTS, &d)), Some(A));
        // Behind a hop-by-hop header holding only padding.
        let mut chain = vec![IPV6_NEXT_DSTOPTS, 0, 1, 4, 0, 0, 0, 0];
        chain.extend_from_slice(&d);
        assert_eq!(
            parse_saved_syn(&ipv6_syn(IPV6_NEXT_HOP_BY_HOP, &chain)),
            Some(A)
        );
    }

    #[test]
    fn ipv6_syns_without_our_option_or_malformed_give_none() {
        let mut d = encode_ipv6_dstopts(A);
        d[0] = 6;
        // Straight to TCP: no extension header.
        assert_eq!(parse_saved_syn(&ipv6_syn(6, &[])), None);
        // Another tag, a length past the end, a truncated header.
        let mut other = d;
        other[4] = b'X';
        assert_eq!(parse_saved_syn(&ipv6_syn(IPV6_NEXT_DSTOPTS, &other)), None);
        let mut long = d;
        long[3] = 200;
        assert_eq!(parse_saved_syn(&ipv6_syn(IPV6_NEXT_DSTOPTS, &long)), None);
        let mut big = d;
        big[1] = 30;
        assert_eq!(parse_saved_syn(&ipv6_syn(IPV6_NEXT_DSTOPTS, &big)), None);
        assert_eq!(parse_saved_syn(&ipv6_syn(IPV6_NEXT_DSTOPTS, &d[..5])), None);
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
