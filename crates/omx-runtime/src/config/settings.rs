//! Every `OMX_*` setting in one table (name, MX alias, default, meaning), the one place
//! where the process environment is read for them. `RuntimeConfig::from_env` parses
//! them from here, `omx_info -c` prints the table with each value and its source, and a
//! test checks README.md's configuration table against it.

use crate::daemon::DEFAULT_SOCKET;

/// One setting. An empty `default` means "not set" (the meaning says what happens then).
#[derive(Debug)]
pub struct Setting {
    pub name: &'static str,
    /// The MX variable the original honoured for it (unless `OMX_IGNORE_MX_ENV=1`).
    pub mx_alias: Option<&'static str>,
    pub default: &'static str,
    pub meaning: &'static str,
    /// One of the original's knobs that has nothing to act on here: accepted, and a
    /// one-line notice says so when it is set (`meaning` says why).
    pub inert: bool,
}

const fn s(name: &'static str, default: &'static str, meaning: &'static str) -> Setting {
    Setting {
        name,
        mx_alias: None,
        default,
        meaning,
        inert: false,
    }
}

const fn mx(
    name: &'static str,
    alias: &'static str,
    default: &'static str,
    meaning: &'static str,
) -> Setting {
    Setting {
        name,
        mx_alias: Some(alias),
        default,
        meaning,
        inert: false,
    }
}

const fn inert(name: &'static str, alias: Option<&'static str>, why: &'static str) -> Setting {
    Setting {
        name,
        mx_alias: alias,
        default: "",
        meaning: why,
        inert: true,
    }
}

/// Every setting, grouped as README.md's table is.
pub const SETTINGS: &[Setting] = &[
    // Boards and peers.
    s("OMX_IFACES", "", "interfaces to attach, comma separated (unset: every one up, Ethernet, not loopback, MTU large enough)"),
    s("OMX_HOSTNAME", "", "host part of board names (unset: the system hostname)"),
    s("OMX_PEERS_FILE", "", "static peers, `MAC name` per line (discovery runs anyway)"),
    s("OMX_IPMAP", "", "IP addresses of peers to omx boards, `ADDRESS BOARD-NAME-OR-MAC` per line (for addresses not on an omx interface)"),
    s("OMX_STATE_DIR", "/dev/shm", "directory of the per-board state (locks, peer tables, inboxes, counters)"),
    // Wire.
    s("OMX_MTU", "9000", "native frame size cap (1280 to 65535); each board follows its own MTU up to it"),
    s("OMX_WIRE", "native", "`mx`: MX-wire-compatible frames (fixed 4 KiB fragments)"),
    s("OMX_ETHERTYPE", "0x86df", "EtherType of native frames (hex)"),
    s("OMX_CHECKSUM", "0", "1: a CRC32C trailer on every native endpoint frame"),
    s("OMX_BUNDLE", "1", "native mode: pack small frames for one endpoint into one Ethernet frame"),
    s("OMX_WIRE_EXTENSIONS", "all", "omx extensions offered to peers (all, none, or a list of latency,checksum,bundle,one-sided,gap-acks); each is used only with peers that offer it"),
    // Protocol.
    s("OMX_RNDV_THRESHOLD", "32768", "eager/rendezvous switch (bytes)"),
    mx("OMX_RESENDS_MAX", "MX_MAX_RETRIES", "1000", "resend budget, in resend delays"),
    s("OMX_RESEND_DELAY_MS", "500", "cap of the retransmission timeout"),
    s("OMX_PULL_RESEND_DELAY_MS", "1000", "cap of the pull re-request timeout"),
    s("OMX_RTO_MIN_US", "250", "floor of the retransmission timeout"),
    s("OMX_PULL_RTO_MIN_US", "1000", "floor of the pull re-request timeout"),
    s("OMX_CLOSE_LINGER_MS", "2000", "a closing endpoint answers for what it sent and received until all is acknowledged and quiet, at most this long"),
    s("OMX_PULL_BLOCKS", "", "pull blocks in flight per large message (unset: 8 native, 4 MX wire)"),
    s("OMX_PARTNERS_MAX", "4096", "remote endpoints an endpoint keeps state for"),
    mx("OMX_ZOMBIE_SEND", "MX_ZOMBIE_SEND", "512", "sends completed early (buffered) at most"),
    mx("OMX_NOTACKED_MAX", "MX_IMM_ACK", "4", "packets received before an immediate ack"),
    s("OMX_UNEXP_MAX", "268435456", "unexpected-queue bytes per endpoint"),
    // Waiting and progress.
    s("OMX_WAITSPIN", "0", "1: blocking waits busy-poll forever"),
    s("OMX_DEBUG_SIGNAL", "0", "1: the signal OMX_DEBUG_SIGNAL_NUM makes every endpoint print its queues on stdout (within a second); 2: each partner's round trips and windows too"),
    s("OMX_DEBUG_SIGNAL_NUM", "10", "the signal of OMX_DEBUG_SIGNAL (10, SIGUSR1 on Linux)"),
    s("OMX_CONNECT_POLLALL", "0", "1: a blocking connect makes progress on every endpoint of the process while it waits (two endpoints of a process without progress thread, OMX_PROGRESS_THREAD=0, can then connect to each other)"),
    s("OMX_WAITINTR", "0", "1: a signal that interrupts a blocking call's sleep ends the call as its timeout would (mx_wait returns with result 0); 0: the call goes back to sleep"),
    s("OMX_WAITSPIN_US", "50", "blocking waits busy-poll this long before sleeping"),
    s("OMX_WAITSPIN_MAX_US", "500", "blocking waits spin longer, up to this, while the application's recent waits ended within it (pauses between messages); at or below OMX_WAITSPIN_US: a fixed budget"),
    s("OMX_CLOCK", "auto", "the engines' clock: auto (the CPU's time-stamp counter scaled between 1 ms anchors where the kernel's clocksource is tsc, else clock_gettime), kernel (clock_gettime at every read)"),
    s("OMX_PROGRESS_THREAD", "1", "0: no background progress thread"),
    s("OMX_COALESCING", "stream", "wake-up policy: off, timer, marked, stream"),
    s("OMX_COALESCING_US", "50", "the wake-up policies' timer"),
    s("OMX_RX_RING_KB", "16384", "receive ring of each endpoint's packet socket"),
    s("OMX_TRANSPORT", "packet", "network data path: packet (AF_PACKET sockets), xdp (AF_XDP, falling back to packet sockets), auto (what wins here: xdp zero-copy where the driver offers it, xdp copy mode up to OMX_XDP_COPY_MTU, else packet)"),
    s("OMX_XDP_COPY_MTU", "1500", "largest frames for which OMX_TRANSPORT=auto takes AF_XDP in copy mode (it beat the packet ring on veth at 1500, not at 3498)"),
    s("OMX_XDP_MODE", "auto", "XDP program placement: auto (native, else generic), native, generic"),
    s("OMX_STRIPE", "0", "1: large messages are striped over every board this host shares with the partner's"),
    s("OMX_DIRECT_RECV", "", "pull replies through a socket of their own: 0, 1, placed, batched (unset: by frame size)"),
    // Intra-node.
    mx("OMX_DISABLE_SELF", "MX_DISABLE_SELF", "0", "1: messages to oneself take the network path"),
    mx("OMX_DISABLE_SHARED", "MX_DISABLE_SHMEM", "0", "1: endpoints of this host are reached through the network path"),
    s("OMX_SHARED_RNDV_THRESHOLD", "4096", "local messages above it use the one-copy rendezvous"),
    s("OMX_SHARED_CMA", "1", "0: never copy between processes (process_vm_readv)"),
    s("OMX_SHARED_RING_KB", "256", "bytes of each shared-memory ring"),
    // Copy offload.
    s("OMX_COPY_OFFLOAD", "auto", "receive copies on a copy thread: 0, 1, auto"),
    s("OMX_COPY_MIN_FRAG", "", "smallest frame whose copy is offloaded (unset: measured, omx_info -v)"),
    s("OMX_COPY_MIN_MSG", "", "smallest message whose copies are offloaded (unset: measured)"),
    s("OMX_COPY_SYNC_MIN", "", "smallest intra-node copy split with the copy thread (unset: measured)"),
    s("OMX_COPY_CPU", "", "pin the copy thread to this CPU"),
    s("OMX_COPY_RECALIBRATE", "0", "1: measure the copy offload again (the result is cached per host)"),
    s("OMX_COPY_STACK", "auto", "offloaded receive and intra-node copies on omx_copyd: off, auto (when it answers), on (it also turns auto offload on)"),
    s("OMX_MEMCPY_MIN", "4194304", "omx_memcpy (libomx_memcpy.so): copies shorter than this stay synchronous"),
    s("OMX_COPY_SERVICE", "", "unix socket of the host's copy service (omx_copyd) for omx_memcpy_async and OMX_COPY_STACK; empty: omx-copyd.sock in OMX_STATE_DIR, 0: none"),
    // Daemon.
    s("OMX_DAEMON", "auto", "open endpoints through omxd: auto (without CAP_NET_RAW), always, never"),
    s("OMX_DAEMON_SOCKET", DEFAULT_SOCKET, "where omxd listens: a path, or @name (abstract, per namespace)"),
    // Diagnostics.
    mx("OMX_VERBOSE", "MX_VERBOSE", "0", "1: say what the library chose and why"),
    s("OMX_VERBOSE_PREFIX", "omx: ", "prefix of the library's messages: `1` gives `OMX:HOST:PID `, anything else is a format with `%p` pid, `%e` endpoint, `%b` board, `%B` board name, `%H` host name (`X` for the endpoint ones when a message is about none; `%B[1-3]`, `%H[0-4]` take characters)"),
    mx("OMX_FATAL_ERRORS", "MX_ERRORS_ARE_FATAL", "1", "the default error handler ends the process"),
    s("OMX_IGNORE_MX_ENV", "0", "1: ignore the MX_* aliases"),
    s("OMX_FAULTS", "", "testing: faults injected on the packet path, e.g. loss:0.02,dup:0.01"),
    s("OMX_ABORT_SLEEPS", "0", "seconds a fatal error sleeps, printing the pid, before the process exits (to attach a debugger)"),
    // The original's endpoint knobs.
    s("OMX_CTXIDS", "", "BITS,SHIFT: context-id split of endpoints opened without the CONTEXT_ID parameter"),
    s("OMX_ANY_ENDPOINT", "", "endpoint index used when the application asks for any endpoint"),
    s("OMX_PROCESS_BINDING", "", "bind the process to CPUs when it opens endpoint n: `c0,c1,...` (n-th entry), `all:CPU`, `file` or `file:PATH` (lines `board MAC ep N irq N mask HEX`)"),
    // The original's knobs with nothing to act on here.
    inert("OMX_RCACHE", Some("MX_RCACHE"), "registration cache: omx pins and registers no memory, so there is nothing to cache"),
    inert("OMX_PRCACHE", None, "parallel registration cache: no memory registration here (and no effect in the original either)"),
    inert("OMX_MEDIUM_SENDQ", None, "medium messages are always copied at post time and complete early"),
    inert("OMX_VERBDEBUG", None, "the original's debug-library trace mask: use OMX_VERBOSE, omx_counters and omx_endpoint_info"),
    inert("OMX_DEBUG_REQUESTS", None, "the original's debug-library request checks: no debug library here"),
    inert("OMX_DEBUG_CHECKSUM", None, "the original's debug payload checksums: OMX_CHECKSUM=1 checks every frame"),
];

/// One line per inert setting that is set, saying that it has no effect and why.
pub fn inert_notices() -> Vec<String> {
    SETTINGS
        .iter()
        .filter(|s| s.inert)
        .filter_map(|s| {
            let (v, _) = lookup(s.name)?;
            Some(format!("{}={v} has no effect: {}", s.name, s.meaning))
        })
        .collect()
}

/// Where a setting's value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Default,
    /// Its `OMX_*` variable.
    Env,
    /// The MX alias.
    MxAlias,
}

impl Source {
    pub fn describe(self, s: &Setting) -> String {
        match self {
            Source::Default => "default".into(),
            Source::Env => "environment".into(),
            Source::MxAlias => format!("environment ({})", s.mx_alias.unwrap_or("")),
        }
    }
}

/// The table row of `name`; a name missing from the table is a programming error.
pub fn setting(name: &str) -> &'static Setting {
    SETTINGS
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} is not in the settings table"))
}

/// The `OMX_*` and `MX_*` variables as `freeze_environment` found them.
static FROZEN: std::sync::OnceLock<std::collections::HashMap<String, String>> =
    std::sync::OnceLock::new();

/// Takes the `OMX_*` and `MX_*` variables as they are now as the process's for good:
/// later changes to the environment are not read. The sockets library does this when
/// it is loaded, before the program's `main`: the program knows nothing of these
/// variables, and some programs clear their environment once started (nginx's workers,
/// daemons), which moved their endpoints to the default state directory, among the
/// endpoints of other processes (docs/SOCKETS.md). MX programs do not freeze: they may
/// set or unset variables before `mx_init`, as with the original.
pub fn freeze_environment() {
    FROZEN.get_or_init(|| {
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| k.starts_with("OMX_") || k.starts_with("MX_"))
            .collect()
    });
}

/// An `OMX_*` or `MX_*` variable: as frozen (`freeze_environment`), else as the
/// environment has it now.
pub fn var(name: &str) -> Option<String> {
    match FROZEN.get() {
        Some(frozen) => frozen.get(name).cloned(),
        None => std::env::var(name).ok(),
    }
}

fn env(name: &str) -> Option<String> {
    var(name)
}

/// The value of `name` as set (its variable, else its MX alias), with the source;
/// `None` when unset.
pub fn lookup(name: &str) -> Option<(String, Source)> {
    let row = setting(name);
    if let Some(v) = env(row.name) {
        return Some((v, Source::Env));
    }
    let alias = row.mx_alias?;
    let ignore_mx = env("OMX_IGNORE_MX_ENV").is_some_and(|v| atoi(&v) != 0);
    if ignore_mx {
        return None;
    }
    env(alias).map(|v| (v, Source::MxAlias))
}

/// The value of `name` as set, else its default (`None` when it has none).
pub fn text(name: &str) -> Option<String> {
    lookup(name).map(|(v, _)| v).or_else(|| {
        let d = setting(name).default;
        (!d.is_empty()).then(|| d.to_string())
    })
}

/// A numeric setting, parsed as C's `atoi` (as the original did).
pub fn num(name: &str) -> i64 {
    text(name).map_or(0, |v| atoi(&v))
}

/// A boolean setting (`atoi != 0`).
pub fn flag(name: &str) -> bool {
    num(name) != 0
}

/// Every setting with its value (as set, or the default) and its source, for
/// `omx_info -c`.
pub fn describe_all() -> Vec<(&'static Setting, Option<String>, Source)> {
    SETTINGS
        .iter()
        .map(|s| match lookup(s.name) {
            Some((v, src)) => (s, Some(v), src),
            None => (
                s,
                (!s.default.is_empty()).then(|| s.default.to_string()),
                Source::Default,
            ),
        })
        .collect()
}

/// C `atoi` semantics (leading digits, 0 otherwise), as the original parsed numbers.
pub fn atoi(s: &str) -> i64 {
    let t = s.trim_start();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let n: i64 = t
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .fold(0i64, |a, c| {
            a.saturating_mul(10).saturating_add(c as i64 - '0' as i64)
        });
    if neg {
        -n
    } else {
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atoi_like_c() {
        assert_eq!(atoi("12abc"), 12);
        assert_eq!(atoi("  -3"), -3);
        assert_eq!(atoi("x"), 0);
        assert_eq!(atoi(""), 0);
    }

    #[test]
    fn names_are_unique() {
        for (i, a) in SETTINGS.iter().enumerate() {
            assert!(a.name.starts_with("OMX_"), "{}", a.name);
            assert!(
                SETTINGS[i + 1..].iter().all(|b| b.name != a.name),
                "{} twice",
                a.name
            );
        }
    }

    /// README.md's configuration table lists exactly the settings of this table (rows
    /// may name several settings; MX aliases are in parentheses).
    #[test]
    fn readme_table_matches_settings() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
                .expect("README.md");
        let start = readme
            .find("| variable | default | meaning |")
            .expect("README.md has its configuration table");
        let mut in_readme = Vec::new();
        for line in readme[start..].lines().skip(2) {
            if !line.starts_with('|') {
                break;
            }
            let first = line.split('|').nth(1).unwrap_or("");
            for part in first.split('`').skip(1).step_by(2) {
                in_readme.push(part.to_string());
            }
        }
        for s in SETTINGS {
            assert!(
                in_readme.iter().any(|n| n == s.name),
                "README.md lacks {}",
                s.name
            );
            if let Some(a) = s.mx_alias {
                assert!(
                    in_readme.iter().any(|n| n == a),
                    "README.md lacks the alias {a}"
                );
            }
        }
        for n in &in_readme {
            assert!(
                SETTINGS
                    .iter()
                    .any(|s| s.name == n || s.mx_alias == Some(n.as_str())),
                "README.md documents {n}, which the settings table lacks"
            );
        }
    }
}
