//! IP addresses, host names and ports mapped to omx boards and endpoints: the one
//! mapping that applications naming peers the sockets way (the libfabric provider's
//! `node`/`service`, a sockets layer) go through.
//!
//! A node resolves to the nic id of the board that owns it, first match wins:
//! 1. an omx board name (`host:board`, or a bare `host` tried as `host:0`) known to the
//!    peer table;
//! 2. an IP address (a literal, or what `getaddrinfo` gives for a host name):
//!    - loopback (`127.0.0.0/8`, `::1`) or an address of one of this host's
//!      interfaces: this host, i.e. the board of that interface, else board 0 (every
//!      local board reaches every local endpoint);
//!    - a line `ADDRESS TARGET` of the file named by `OMX_IPMAP`, TARGET an omx board
//!      name or a MAC (for peers whose IP addresses live on an interface omx does not
//!      use);
//!    - the kernel's neighbour table (ARP, IPv6 neighbour discovery) on a board's
//!      interface: the peer's MAC there is its board's nic id. A missing entry is
//!      asked for by sending the address an empty UDP datagram (discard port), then
//!      the table is read again until the wait ends.
//! 3. an omx board name again, now waiting for discovery to learn it.
//!
//! Ports: see [`port_endpoint`].

use crate::runtime::{Runtime, MAX_ENDPOINTS};
use omx_proto::{nic_id_from_mac, NicId};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

/// Connection key of an endpoint bound to a port: this base or-ed with the port, so that
/// a client naming port P reaches only the endpoint that bound P (any other endpoint in
/// P's slot refuses the key).
pub const PORT_KEY_BASE: u32 = 0x4f50_0000;

/// Endpoint indexes ports are spread over: every index but the last, which `omxd`'s
/// service endpoint may hold.
const PORT_SLOTS: u32 = MAX_ENDPOINTS as u32 - 1;

/// The MX endpoint index and connection key that carry port `port`: index `port mod 31`,
/// key [`PORT_KEY_BASE`]` | port`. Deterministic, so a client computes the server's
/// endpoint from the port alone; two ports with the same index on one host collide (the
/// second bind finds the index busy) and a client never reaches the wrong one (key).
pub fn port_endpoint(port: u16) -> (u8, u32) {
    (
        (port as u32 % PORT_SLOTS) as u8,
        PORT_KEY_BASE | port as u32,
    )
}

/// Why a node did not resolve.
#[derive(Debug)]
pub enum ResolveError {
    /// Neither a known board name nor an address (or a name resolving to one).
    UnknownName,
    /// An address, but no board owns it: not local, not in `OMX_IPMAP`, and no
    /// neighbour on a board's interface answered for it.
    NoBoard(IpAddr),
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResolveError::UnknownName => write!(f, "neither an omx host nor an IP address"),
            ResolveError::NoBoard(ip) => write!(
                f,
                "no omx board answers for {ip} (not local, not in OMX_IPMAP, no neighbour on an omx interface)"
            ),
        }
    }
}

/// The nic id of the board that owns `node` (see the module documentation), waiting up
/// to `wait` for neighbour resolution or discovery.
pub fn resolve_node(rt: &Runtime, node: &str, wait: Duration) -> Result<NicId, ResolveError> {
    let until = Instant::now() + wait;
    let literal = parse_ip(node);
    if literal.is_none() {
        if let Some(n) = board_name(rt, node, Duration::ZERO) {
            return Ok(n);
        }
    }
    let ips: Vec<IpAddr> = match literal {
        Some(ip) => vec![ip],
        None => (node, 0)
            .to_socket_addrs()
            .map(|a| a.map(|s| s.ip()).collect())
            .unwrap_or_default(),
    };
    if ips.is_empty() {
        let left = until.saturating_duration_since(Instant::now());
        return board_name(rt, node, left).ok_or(ResolveError::UnknownName);
    }
    let mut last = None;
    for ip in ips {
        match resolve_ip(rt, ip, until) {
            Ok(n) => return Ok(n),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or(ResolveError::UnknownName))
}

/// A board name as MX names boards, or a bare host name as its board 0.
fn board_name(rt: &Runtime, node: &str, wait: Duration) -> Option<NicId> {
    let n = rt.hostname_to_nic_id(node, wait);
    if n.is_some() || node.contains(':') {
        return n;
    }
    rt.hostname_to_nic_id(&format!("{node}:0"), Duration::ZERO)
}

/// An IP literal, IPv6 possibly in brackets (`[::1]`).
fn parse_ip(node: &str) -> Option<IpAddr> {
    let s = node
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(node);
    s.parse().ok()
}

fn resolve_ip(rt: &Runtime, ip: IpAddr, until: Instant) -> Result<NicId, ResolveError> {
    let local_board = || rt.boards.first().map(|b| b.nic_id);
    if ip.is_loopback() {
        return local_board().ok_or(ResolveError::NoBoard(ip));
    }
    if let Some(ifname) = local_interface_of(ip) {
        let own = rt.boards.iter().find(|b| b.iface.name == ifname);
        return own
            .map(|b| b.nic_id)
            .or_else(local_board)
            .ok_or(ResolveError::NoBoard(ip));
    }
    if let Some(path) = &rt.cfg.ip_map_file {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Some(target) = ipmap_target(&text, ip) {
                return match parse_mac(&target) {
                    Some(mac) => Ok(nic_id_from_mac(mac)),
                    None => {
                        let left = until.saturating_duration_since(Instant::now());
                        board_name(rt, &target, left).ok_or(ResolveError::NoBoard(ip))
                    }
                };
            }
        }
    }
    let board_ifs: Vec<u32> = rt.boards.iter().map(|b| b.iface.index).collect();
    let mut asked = false;
    loop {
        if let Ok(table) = neighbours() {
            if let Some(mac) = table
                .iter()
                .find(|n| n.ip == ip && board_ifs.contains(&n.ifindex))
                .map(|n| n.mac)
            {
                return Ok(nic_id_from_mac(mac));
            }
        }
        if Instant::now() >= until {
            return Err(ResolveError::NoBoard(ip));
        }
        if !asked {
            asked = true;
            poke(ip);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Makes the kernel resolve `ip`'s link-layer address: an empty datagram to the
/// discard port (nobody needs to answer; the neighbour lookup is what we want).
fn poke(ip: IpAddr) {
    let any: SocketAddr = match ip {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    if let Ok(s) = UdpSocket::bind(any) {
        let _ = s.send_to(&[], (ip, 9));
    }
}

/// The target `OMX_IPMAP` gives `ip`: lines `ADDRESS TARGET`, `#` comments.
fn ipmap_target(text: &str, ip: IpAddr) -> Option<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?, w.next()?))
        })
        .find(|(addr, _)| parse_ip(addr) == Some(ip))
        .map(|(_, target)| target.to_string())
}

/// `aa:bb:cc:dd:ee:ff` (or with `-`).
fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    if parts.len() != 6 {
        return None;
    }
    let mut mac = [0u8; 6];
    for (m, p) in mac.iter_mut().zip(parts) {
        if p.len() != 2 {
            return None;
        }
        *m = u8::from_str_radix(p, 16).ok()?;
    }
    Some(mac)
}

/// The name of the local interface carrying `ip`, if any (getifaddrs).
fn local_interface_of(ip: IpAddr) -> Option<String> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` walks the list getifaddrs returned; addresses are sized by family.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        let addr = unsafe { sockaddr_ip(ifa.ifa_addr) };
        if addr == Some(ip) {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
            found = Some(name.to_string_lossy().into_owned());
            break;
        }
    }
    // SAFETY: `head` came from getifaddrs.
    unsafe { libc::freeifaddrs(head) };
    found
}

/// The IP address of a `sockaddr` of family AF_INET or AF_INET6.
///
/// # Safety
/// `sa` points to a sockaddr at least as large as its family says.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    match (*sa).sa_family as i32 {
        libc::AF_INET => {
            let s = &*(sa as *const libc::sockaddr_in);
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr))))
        }
        libc::AF_INET6 => {
            let s = &*(sa as *const libc::sockaddr_in6);
            Some(IpAddr::V6(Ipv6Addr::from(s.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

/// One entry of the kernel's neighbour table that has a link-layer address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Neighbour {
    pub ip: IpAddr,
    pub mac: [u8; 6],
    pub ifindex: u32,
}

const RTM_GETNEIGH: u16 = 30;
const RTM_NEWNEIGH: u16 = 28;
const NLMSG_DONE: u16 = 3;
const NLMSG_ERROR: u16 = 2;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
/// NUD states without a usable address.
const NUD_INCOMPLETE: u16 = 0x01;
const NUD_FAILED: u16 = 0x20;
const NLMSG_HDR: usize = 16;
const NDMSG_LEN: usize = 12;

/// The neighbour table of this network namespace (IPv4 and IPv6), over rtnetlink.
pub fn neighbours() -> io::Result<Vec<Neighbour>> {
    // SAFETY: plain socket calls on a descriptor we own and close.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let result = dump_neighbours(fd);
    unsafe { libc::close(fd) };
    result
}

fn dump_neighbours(fd: i32) -> io::Result<Vec<Neighbour>> {
    let mut req = [0u8; NLMSG_HDR + NDMSG_LEN];
    req[0..4].copy_from_slice(&((NLMSG_HDR + NDMSG_LEN) as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&RTM_GETNEIGH.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    req[6..8].copy_from_slice(&flags.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // ndmsg: family AF_UNSPEC (every family), everything else zero.
    // SAFETY: `req` outlives the call; the kernel is the default destination.
    if unsafe { libc::send(fd, req.as_ptr().cast(), req.len(), 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: receives into a buffer we own.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if parse_neigh_messages(&buf[..n as usize], &mut out)? {
            return Ok(out);
        }
    }
}

/// Parses one datagram of a neighbour dump into `out`; true once the dump is done.
fn parse_neigh_messages(mut b: &[u8], out: &mut Vec<Neighbour>) -> io::Result<bool> {
    let u16_at = |b: &[u8], i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
    let u32_at = |b: &[u8], i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed netlink message");
    while b.len() >= NLMSG_HDR {
        let len = u32_at(b, 0) as usize;
        if len < NLMSG_HDR || len > b.len() {
            return Err(bad());
        }
        let msg = &b[..len];
        match u16_at(msg, 4) {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let code = i32::from_ne_bytes(msg.get(16..20).ok_or_else(bad)?.try_into().unwrap());
                return Err(io::Error::from_raw_os_error(-code));
            }
            RTM_NEWNEIGH if len >= NLMSG_HDR + NDMSG_LEN => {
                let nd = &msg[NLMSG_HDR..];
                let ifindex = u32_at(nd, 4);
                let state = u16_at(nd, 8);
                let (mut ip, mut mac) = (None, None);
                let mut attrs = &nd[NDMSG_LEN..];
                while attrs.len() >= 4 {
                    let alen = u16_at(attrs, 0) as usize;
                    if alen < 4 || alen > attrs.len() {
                        break;
                    }
                    let data = &attrs[4..alen];
                    match (u16_at(attrs, 2), data.len()) {
                        (NDA_DST, 4) => ip = Some(IpAddr::from(<[u8; 4]>::try_from(data).unwrap())),
                        (NDA_DST, 16) => {
                            ip = Some(IpAddr::from(<[u8; 16]>::try_from(data).unwrap()))
                        }
                        (NDA_LLADDR, 6) => mac = Some(<[u8; 6]>::try_from(data).unwrap()),
                        _ => {}
                    }
                    attrs = &attrs[((alen + 3) & !3).min(attrs.len())..];
                }
                if let (Some(ip), Some(mac)) = (ip, mac) {
                    if state & (NUD_INCOMPLETE | NUD_FAILED) == 0 {
                        out.push(Neighbour { ip, mac, ifindex });
                    }
                }
            }
            _ => {}
        }
        b = &b[((len + 3) & !3).min(b.len())..];
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_spread_over_the_non_service_indexes_with_their_own_key() {
        assert_eq!(
            port_endpoint(9228),
            ((9228 % 31) as u8, PORT_KEY_BASE | 9228)
        );
        assert_eq!(port_endpoint(65535).0, (65535 % 31) as u8);
        let service = MAX_ENDPOINTS - 1;
        assert!((0..=u16::MAX).all(|p| port_endpoint(p).0 < service));
        // Ports one apart never share an endpoint; ports sharing one differ in key.
        assert_ne!(port_endpoint(9228).0, port_endpoint(9229).0);
        let (a, b) = (port_endpoint(100), port_endpoint(131));
        assert_eq!(a.0, b.0);
        assert_ne!(a.1, b.1);
    }

    #[test]
    fn ip_literals_with_and_without_brackets() {
        assert_eq!(parse_ip("10.1.2.3"), Some("10.1.2.3".parse().unwrap()));
        assert_eq!(parse_ip("[fd00::1]"), Some("fd00::1".parse().unwrap()));
        assert_eq!(parse_ip("fd00::1"), Some("fd00::1".parse().unwrap()));
        assert_eq!(parse_ip("h0:0"), None);
        assert_eq!(parse_ip("[h0]"), None);
    }

    #[test]
    fn ipmap_file_lines() {
        let text = "# peers\n10.0.0.2  h1:0 # the other host\n\nfd00::2 02:00:00:00:aa:02\nbogus\n";
        assert_eq!(
            ipmap_target(text, "10.0.0.2".parse().unwrap()).as_deref(),
            Some("h1:0")
        );
        assert_eq!(
            ipmap_target(text, "fd00::2".parse().unwrap()).as_deref(),
            Some("02:00:00:00:aa:02")
        );
        assert_eq!(ipmap_target(text, "10.0.0.3".parse().unwrap()), None);
        assert_eq!(parse_mac("02:00:00:00:aa:02"), Some([2, 0, 0, 0, 0xaa, 2]));
        assert_eq!(parse_mac("02-00-00-00-AA-02"), Some([2, 0, 0, 0, 0xaa, 2]));
        assert_eq!(parse_mac("02:00:00:00:aa"), None);
        assert_eq!(parse_mac("h1:0"), None);
    }

    /// A neighbour dump as the kernel sends it: one reachable IPv4 entry, one
    /// incomplete entry (no address yet), one IPv6 entry, then NLMSG_DONE.
    fn neigh_msg(ip: &[u8], mac: Option<[u8; 6]>, state: u16, ifindex: u32) -> Vec<u8> {
        let mut nd = vec![0u8; NDMSG_LEN];
        nd[4..8].copy_from_slice(&ifindex.to_ne_bytes());
        nd[8..10].copy_from_slice(&state.to_ne_bytes());
        let mut attr = |t: u16, d: &[u8]| {
            nd.extend_from_slice(&((4 + d.len()) as u16).to_ne_bytes());
            nd.extend_from_slice(&t.to_ne_bytes());
            nd.extend_from_slice(d);
            while !nd.len().is_multiple_of(4) {
                nd.push(0);
            }
        };
        attr(NDA_DST, ip);
        if let Some(m) = mac {
            attr(NDA_LLADDR, &m);
        }
        let mut m = vec![0u8; NLMSG_HDR];
        m[0..4].copy_from_slice(&((NLMSG_HDR + nd.len()) as u32).to_ne_bytes());
        m[4..6].copy_from_slice(&RTM_NEWNEIGH.to_ne_bytes());
        m.extend_from_slice(&nd);
        m
    }

    #[test]
    fn neighbour_dump_parsing() {
        let mac = [2, 0, 0, 0, 7, 2];
        let v6: Ipv6Addr = "fd00::2".parse().unwrap();
        let mut dump = neigh_msg(&[10, 0, 0, 2], Some(mac), 0x02, 5);
        dump.extend(neigh_msg(&[10, 0, 0, 3], None, NUD_INCOMPLETE, 5));
        dump.extend(neigh_msg(&v6.octets(), Some(mac), 0x04, 6));
        let mut out = Vec::new();
        assert!(!parse_neigh_messages(&dump, &mut out).unwrap());
        assert_eq!(
            out,
            vec![
                Neighbour {
                    ip: "10.0.0.2".parse().unwrap(),
                    mac,
                    ifindex: 5
                },
                Neighbour {
                    ip: IpAddr::V6(v6),
                    mac,
                    ifindex: 6
                },
            ]
        );
        let mut done = vec![0u8; NLMSG_HDR];
        done[0..4].copy_from_slice(&(NLMSG_HDR as u32).to_ne_bytes());
        done[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
        assert!(parse_neigh_messages(&done, &mut out).unwrap());
        // A length past the datagram is an error, not a panic.
        let mut bad = done.clone();
        bad[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(parse_neigh_messages(&bad, &mut out).is_err());
    }

    #[test]
    fn this_namespace_has_a_readable_neighbour_table() {
        // The dump round trip works (the table may well be empty).
        neighbours().expect("rtnetlink neighbour dump");
    }
}
