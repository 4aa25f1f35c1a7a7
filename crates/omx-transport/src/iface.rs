//! Network interfaces and the rule deciding which ones become Open-MX boards.

use std::io;

use crate::sys;

/// One network interface of the calling thread's network namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Kernel name, e.g. `eth0`.
    pub name: String,
    /// Kernel interface index (what AF_PACKET sockets bind to).
    pub index: u32,
    /// Hardware address (all zero for `lo`).
    pub mac: [u8; 6],
    /// Current MTU: the largest Ethernet payload, header excluded.
    pub mtu: u32,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Hardware type is Ethernet (`ARPHRD_ETHER`); excludes `lo`, tunnels, IPoIB...
    pub ethernet: bool,
    /// Loopback device (`IFF_LOOPBACK`).
    pub loopback: bool,
}

impl Interface {
    /// Largest whole frame (Ethernet header included) this interface carries.
    pub fn max_frame_len(&self) -> usize {
        self.mtu as usize + crate::ETH_HEADER_LEN
    }

    /// Why the default (no `OMX_IFACES`) rule leaves this interface out, `None` when it
    /// attaches it: up, Ethernet, not loopback, and an MTU of at least `min_mtu`.
    pub fn default_skip_reason(&self, min_mtu: u32) -> Option<String> {
        if self.loopback {
            Some("loopback (name it in OMX_IFACES to use it)".into())
        } else if !self.ethernet {
            Some("not Ethernet".into())
        } else if !self.up {
            Some("down".into())
        } else if self.mtu < min_mtu {
            Some(format!("MTU {} below the {min_mtu} omx needs", self.mtu))
        } else {
            None
        }
    }
}

/// One interface and whether it becomes a board: `skipped` says why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Surveyed {
    pub iface: Interface,
    pub skipped: Option<String>,
}

/// Every interface of `all`, in kernel order, with the reason [`select_from`] leaves it
/// out (same arguments), so that tools can say why an interface is not used.
pub fn survey(all: &[Interface], min_mtu: u32, names: Option<&[String]>) -> Vec<Surveyed> {
    all.iter()
        .map(|i| Surveyed {
            iface: i.clone(),
            skipped: match names {
                None => i.default_skip_reason(min_mtu),
                Some(list) if list.contains(&i.name) => None,
                Some(_) => Some("not listed in OMX_IFACES".into()),
            },
        })
        .collect()
}

/// Lists the interfaces of the calling thread's network namespace in kernel
/// (ifindex) order.
///
/// Uses netlink (via `if_nameindex`) and SIOCGIF* ioctls rather than
/// `/sys/class/net`: sysfs shows the namespace it was mounted in, which is
/// wrong for a thread that entered another namespace with `setns`.
pub fn list_interfaces() -> io::Result<Vec<Interface>> {
    let ctl = sys::IfCtl::new()?;
    let mut names = sys::if_nameindex()?;
    names.sort_by_key(|(i, _)| *i);
    let mut out = Vec::with_capacity(names.len());
    for (index, name) in names {
        // An interface can vanish between the listing and the ioctls; skip it.
        let facts = (|| {
            let flags = ctl.flags(&name)?;
            let mtu = ctl.mtu(&name)?;
            let (hwtype, mac) = ctl.hwaddr(&name)?;
            Ok::<_, io::Error>((flags, mtu, hwtype, mac))
        })();
        let (flags, mtu, hwtype, mac) = match facts {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => continue,
            Err(e) => return Err(e),
        };
        out.push(Interface {
            name,
            index,
            mac,
            mtu,
            up: flags & sys::IFF_UP != 0,
            ethernet: hwtype == sys::ARPHRD_ETHER,
            loopback: flags & sys::IFF_LOOPBACK != 0,
        });
    }
    Ok(out)
}

/// Looks up one interface by name.
pub fn interface_by_name(name: &str) -> io::Result<Interface> {
    list_interfaces()?
        .into_iter()
        .find(|i| i.name == name)
        .ok_or_else(|| unknown(name))
}

fn unknown(name: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("no network interface named {name:?}"),
    )
}

/// Picks the interfaces to attach as boards, following the original driver's rule.
///
/// * `names == None`: every interface that is up, Ethernet, not loopback and
///   has `mtu >= min_mtu` (what the wire mode needs: each board then uses frames
///   of its own MTU), in kernel order. Skipping the others is what lets a default
///   configuration run on any machine; [`survey`] says why each one was skipped.
/// * `names == Some(list)` (from `OMX_IFACES=if1,if2`): exactly those, in
///   that order, `lo` included. The user asked for them explicitly, so one
///   that is down or has a small MTU is still attached (it may come up or be
///   reconfigured later) and only a warning is returned; an unknown name or a
///   duplicate is an error.
pub fn select_boards(
    min_mtu: u32,
    names: Option<&[String]>,
) -> io::Result<(Vec<Interface>, Vec<String>)> {
    let all = list_interfaces()?;
    select_from(all, min_mtu, names)
}

/// [`select_boards`] on an explicit interface list (testable without a kernel).
pub fn select_from(
    all: Vec<Interface>,
    min_mtu: u32,
    names: Option<&[String]>,
) -> io::Result<(Vec<Interface>, Vec<String>)> {
    let mut warnings = Vec::new();
    let Some(names) = names else {
        let boards = survey(&all, min_mtu, None)
            .into_iter()
            .filter(|s| s.skipped.is_none())
            .map(|s| s.iface)
            .collect();
        return Ok((boards, warnings));
    };
    let mut boards: Vec<Interface> = Vec::with_capacity(names.len());
    for name in names {
        if boards.iter().any(|b| &b.name == name) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("interface {name:?} listed twice"),
            ));
        }
        let iface = all
            .iter()
            .find(|i| &i.name == name)
            .ok_or_else(|| unknown(name))?;
        if !iface.up {
            warnings.push(format!("interface {name} is down; attached anyway"));
        }
        if iface.mtu < min_mtu {
            warnings.push(format!(
                "interface {name} has MTU {} < required {min_mtu}; large frames will be dropped",
                iface.mtu
            ));
        }
        boards.push(iface.clone());
    }
    Ok((boards, warnings))
}

/// Parses an `OMX_IFACES`-style list: comma separated, blanks ignored.
pub fn parse_iface_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(
        name: &str,
        index: u32,
        mtu: u32,
        up: bool,
        ethernet: bool,
        loopback: bool,
    ) -> Interface {
        Interface {
            name: name.into(),
            index,
            mac: [0; 6],
            mtu,
            up,
            ethernet,
            loopback,
        }
    }

    fn sample() -> Vec<Interface> {
        vec![
            iface("lo", 1, 65536, true, false, true),
            iface("eth0", 2, 1500, true, true, false),
            iface("eth1", 3, 9000, true, true, false),
            iface("eth2", 4, 9000, false, true, false),
            iface("tun0", 5, 9000, true, false, false),
        ]
    }

    fn names(v: &[Interface]) -> Vec<&str> {
        v.iter().map(|i| i.name.as_str()).collect()
    }

    #[test]
    fn default_rule() {
        let (b, w) = select_from(sample(), 1280, None).unwrap();
        assert_eq!(names(&b), ["eth0", "eth1"]);
        assert!(w.is_empty());
        let (b, _) = select_from(sample(), 4144, None).unwrap();
        assert_eq!(names(&b), ["eth1"]);
    }

    #[test]
    fn survey_says_why_each_interface_is_skipped() {
        let mut all = sample();
        all.push(iface("eth3", 6, 1200, true, true, false));
        let why: Vec<_> = survey(&all, 1280, None)
            .into_iter()
            .map(|s| (s.iface.name, s.skipped))
            .collect();
        let reason = |n: &str| why.iter().find(|w| w.0 == n).unwrap().1.clone();
        assert!(reason("lo").unwrap().contains("loopback"));
        assert_eq!(reason("eth0"), None);
        assert_eq!(reason("eth1"), None);
        assert_eq!(reason("eth2").as_deref(), Some("down"));
        assert_eq!(reason("tun0").as_deref(), Some("not Ethernet"));
        assert_eq!(
            reason("eth3").as_deref(),
            Some("MTU 1200 below the 1280 omx needs")
        );
        let listed = ["lo".to_string()];
        let s = survey(&all, 1280, Some(&listed));
        assert_eq!(s[0].skipped, None);
        assert!(s[1..].iter().all(|s| s.skipped.is_some()));
    }

    #[test]
    fn explicit_list_keeps_order_and_warns() {
        let list: Vec<String> = ["eth2", "lo", "eth0"].map(String::from).to_vec();
        let (b, w) = select_from(sample(), 9000, Some(&list)).unwrap();
        assert_eq!(names(&b), ["eth2", "lo", "eth0"]);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("eth2") && w[0].contains("down"));
        assert!(w[1].contains("eth0") && w[1].contains("MTU"));
    }

    #[test]
    fn unknown_and_duplicate_names_fail() {
        let e = select_from(sample(), 1500, Some(&["nope".to_string()])).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        let e = select_from(sample(), 1500, Some(&["eth0".into(), "eth0".into()])).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn parse_list() {
        assert_eq!(parse_iface_list(" eth0, ,lo,"), ["eth0", "lo"]);
        assert!(parse_iface_list("").is_empty());
    }
}

/// Receive interrupt coalescing of a NIC (what `ethtool -c` shows), as far as it
/// matters for latency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxCoalescing {
    pub rx_usecs: u32,
    pub rx_frames: u32,
    pub adaptive_rx: bool,
    pub rx_usecs_low: u32,
    pub pkt_rate_low: u32,
}

impl RxCoalescing {
    /// The delay a lone frame may wait before its interrupt: with adaptive
    /// coalescing, the low-rate setting applies to a latency test.
    pub fn effective_usecs(&self) -> u32 {
        if self.adaptive_rx {
            self.rx_usecs_low
        } else {
            self.rx_usecs
        }
    }

    /// The original driver warned at 13 us and more: it costs small messages tens
    /// of microseconds.
    pub fn hurts_latency(&self) -> bool {
        self.effective_usecs() >= 13
    }
}

/// Reads `name`'s coalescing settings; `Unsupported` for virtual interfaces.
pub fn rx_coalescing(name: &str) -> io::Result<RxCoalescing> {
    let c = sys::IfCtl::new()?.coalesce(name)?;
    Ok(RxCoalescing {
        rx_usecs: c[0],
        rx_frames: c[1],
        adaptive_rx: c[9] != 0,
        rx_usecs_low: c[12],
        pkt_rate_low: c[11],
    })
}

#[cfg(test)]
mod coalescing_tests {
    use super::RxCoalescing;

    #[test]
    fn warns_from_13_us_with_the_low_setting_when_adaptive() {
        let c = RxCoalescing {
            rx_usecs: 50,
            rx_frames: 1,
            adaptive_rx: false,
            rx_usecs_low: 0,
            pkt_rate_low: 0,
        };
        assert!(c.hurts_latency());
        let adaptive = RxCoalescing {
            adaptive_rx: true,
            ..c
        };
        assert!(!adaptive.hurts_latency(), "low-rate setting 0 us");
        let fast = RxCoalescing { rx_usecs: 12, ..c };
        assert!(!fast.hurts_latency());
    }
}
