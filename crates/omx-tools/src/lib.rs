//! Shared helpers of the omx tools.

pub mod binding;
pub mod dump;

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

/// Parses a tool's command line, as `A::parse()` does; `--man` as the only argument
/// prints the tool's manual page (roff) instead, which `make install` installs.
pub fn parse_args<A: clap::Parser>() -> A {
    parse_args_in_section::<A>("1")
}

/// [`parse_args`] for a tool whose manual page belongs in `section` (8 for daemons).
pub fn parse_args_in_section<A: clap::Parser>(section: &str) -> A {
    let mut args = std::env::args_os().skip(1);
    if args.next().is_some_and(|a| a == "--man") && args.next().is_none() {
        let man = clap_mangen::Man::new(A::command())
            .section(section)
            .source(format!("omx {}", env!("CARGO_PKG_VERSION")))
            .manual("omx manual");
        let mut out = std::io::stdout().lock();
        if let Err(e) = man.render(&mut out) {
            eprintln!("cannot write the manual page: {e}");
            std::process::exit(1);
        }
        std::process::exit(0);
    }
    A::parse()
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

/// A remote participant of a multi-host run: its board name, nic id, and its index
/// among all participants (nic ids sorted, so every process computes the same one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Participant {
    pub name: String,
    pub nic: NicId,
    pub id: u8,
}

/// Resolves the participants' board names (waiting for discovery until `deadline`;
/// our own board's name and duplicates are skipped) and returns this process's index
/// and the remote participants.
pub fn resolve_participants(
    rt: &Arc<Runtime>,
    board: u32,
    names: &[String],
    deadline: std::time::Instant,
) -> Result<(u8, Vec<Participant>), String> {
    let own = rt.board(board).ok_or(format!("no board #{board}"))?;
    let mut hosts: Vec<(String, NicId)> = Vec::new();
    for n in names.iter().filter(|n| **n != own.name) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let nic = rt
            .hostname_to_nic_id(n, left)
            .ok_or(format!("cannot resolve peer name {n}"))?;
        if nic != own.nic_id && !hosts.iter().any(|(_, x)| *x == nic) {
            hosts.push((n.clone(), nic));
        }
    }
    let mut all: Vec<NicId> = hosts.iter().map(|h| h.1).chain([own.nic_id]).collect();
    all.sort_unstable();
    if all.len() > 255 {
        return Err("at most 255 participants".into());
    }
    let index = |nic: NicId| all.iter().position(|&x| x == nic).expect("listed") as u8;
    let remotes = hosts
        .into_iter()
        .map(|(name, nic)| Participant {
            id: index(nic),
            name,
            nic,
        })
        .collect();
    Ok((index(own.nic_id), remotes))
}
