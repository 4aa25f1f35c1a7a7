//! Interface listing and the board attach rule, inside namespaces.

mod common;

use std::io;

use common::{skip, Hosts};
use omx_transport::{list_interfaces, netns, select_boards, Interface};

fn in_host<T: Send + 'static>(h: &Hosts, i: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
    netns::run_in(&h.ns(i), f).expect("enter namespace")
}

fn names(v: &[Interface]) -> Vec<String> {
    v.iter().map(|i| i.name.clone()).collect()
}

#[test]
fn lists_namespace_interfaces_in_kernel_order() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    let list = in_host(&h, 1, list_interfaces).unwrap();
    assert_eq!(names(&list), ["lo", "omx0"], "{list:?}");
    assert!(list.windows(2).all(|w| w[0].index < w[1].index));
    let lo = &list[0];
    assert!(lo.up && lo.loopback && !lo.ethernet, "{lo:?}");
    assert_eq!(lo.mac, [0; 6]);
    let omx0 = &list[1];
    assert!(omx0.up && omx0.ethernet && !omx0.loopback, "{omx0:?}");
    assert_eq!(omx0.mtu, 9000);
    assert_eq!(omx0.mac[..4], [2, 0, 0, 0]);
    assert_eq!(omx0.mac[5], 2, "host 1 gets MAC ending in :02");
    // The other host's interface has its own MAC.
    assert_ne!(h.iface(0, "omx0").mac, omx0.mac);
}

/// Host 0 gets, besides omx0 (up, MTU 9000): `small` (up, MTU 1500), `dn`
/// (down, MTU 9000) and `big` (up, MTU 9000), created in that order.
fn extra_interfaces(h: &Hosts) {
    h.ip(0, "link add small type veth peer name smallp");
    h.ip(0, "link set small mtu 1500");
    h.ip(0, "link add dn type veth peer name dnp");
    h.ip(0, "link set dn mtu 9000");
    h.ip(0, "link add big type veth peer name bigp");
    h.ip(0, "link set big mtu 9000");
    h.ip(0, "link set bigp mtu 9000");
    for up in ["small", "smallp", "big", "bigp"] {
        h.ip(0, &format!("link set {up} up"));
    }
}

#[test]
fn default_attach_rule_takes_up_ethernet_big_enough() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    extra_interfaces(&h);
    let all = names(&in_host(&h, 0, list_interfaces).unwrap());
    let in_kernel_order = |wanted: &[&str]| -> Vec<String> {
        all.iter()
            .filter(|n| wanted.contains(&n.as_str()))
            .cloned()
            .collect()
    };
    let (boards, warnings) = in_host(&h, 0, || select_boards(9000, None)).unwrap();
    // `lo` (loopback), `dn`/`dnp` (down) and `small*` (MTU 1500) left out.
    assert_eq!(names(&boards), in_kernel_order(&["omx0", "big", "bigp"]));
    assert!(warnings.is_empty(), "{warnings:?}");
    let (boards, _) = in_host(&h, 0, || select_boards(1500, None)).unwrap();
    assert_eq!(
        names(&boards),
        in_kernel_order(&["omx0", "small", "smallp", "big", "bigp"])
    );
    assert_eq!(boards[0].name, "omx0");
}

#[test]
fn explicit_names_attach_in_given_order_with_warnings() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    extra_interfaces(&h);
    let list: Vec<String> = ["dn", "lo", "small", "omx0"].map(String::from).to_vec();
    let (boards, warnings) = in_host(&h, 0, move || select_boards(9000, Some(&list))).unwrap();
    assert_eq!(names(&boards), ["dn", "lo", "small", "omx0"]);
    assert!(boards[1].loopback);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].contains("dn") && warnings[0].contains("down"),
        "{warnings:?}"
    );
    assert!(
        warnings[1].contains("small") && warnings[1].contains("1500"),
        "{warnings:?}"
    );

    let err = in_host(&h, 0, || {
        select_boards(9000, Some(&["omx0".into(), "eth7".into()]))
    })
    .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
    assert!(err.to_string().contains("eth7"), "{err}");
}

#[test]
fn omx_ifaces_style_list_can_put_lo_first() {
    if skip() {
        return;
    }
    let h = Hosts::up(2, 9000);
    assert_eq!(omx_transport::parse_iface_list("omx0, lo"), ["omx0", "lo"]);
    let (boards, _) = in_host(&h, 0, || {
        let names = omx_transport::parse_iface_list("lo,omx0");
        select_boards(9000, Some(&names))
    })
    .unwrap();
    assert_eq!(names(&boards), ["lo", "omx0"]);
}
