//! The original's process knobs applied when an endpoint opens or a fatal error ends
//! the process: `OMX_CTXIDS`, `OMX_ANY_ENDPOINT`, `OMX_PROCESS_BINDING` and
//! `OMX_ABORT_SLEEPS` (read through the runtime's settings table).

use omx_runtime::config::settings::{flag, num, text};

/// `OMX_CTXIDS=BITS,SHIFT`: the context-id split of endpoints opened without the
/// CONTEXT_ID parameter (ignored without a comma, as the original did).
pub(crate) fn default_context_ids() -> Option<(u8, u8)> {
    parse_ctxids(&text("OMX_CTXIDS")?)
}

fn parse_ctxids(v: &str) -> Option<(u8, u8)> {
    let (bits, shift) = v.split_once(',')?;
    Some((bits.trim().parse().ok()?, shift.trim().parse().ok()?))
}

/// `OMX_ANY_ENDPOINT=N`: the index taken when the application asks for any endpoint.
pub(crate) fn any_endpoint() -> Option<u32> {
    text("OMX_ANY_ENDPOINT")?.trim().parse().ok()
}

/// Whether a blocking connect makes progress on every endpoint of the process while
/// it waits (`OMX_CONNECT_POLLALL`).
pub fn connect_poll_all() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| flag("OMX_CONNECT_POLLALL"))
}

/// Where `OMX_PROCESS_BINDING=file` reads its bindings (the original's default).
const BINDING_FILE: &str = "/tmp/open-mx.bindings.dat";

/// The CPUs the process binds to when it opens endpoint `index` on the board with MAC
/// address `mac` (`OMX_PROCESS_BINDING`), or `None` for no binding.
fn binding_for(spec: &str, mac: [u8; 6], index: u32) -> Option<Vec<usize>> {
    let spec = spec.trim();
    if let Some(cpu) = spec.strip_prefix("all:") {
        return cpu.trim().parse().ok().map(|c| vec![c]);
    }
    if spec == "file" || spec.starts_with("file:") {
        let path = spec.strip_prefix("file:").unwrap_or(BINDING_FILE);
        let lines = std::fs::read_to_string(path).ok()?;
        return binding_from_file(&lines, mac, index);
    }
    // `c0,c1,...`: the entry of this endpoint index (an empty entry is CPU 0).
    let entry = spec.split(',').nth(index as usize)?;
    let entry = entry.trim();
    if entry.is_empty() {
        return Some(vec![0]);
    }
    entry.parse().ok().map(|c| vec![c])
}

/// Lines `board MAC ep N irq N mask HEX`, as `omx_prepare_binding` wrote them.
fn binding_from_file(lines: &str, mac: [u8; 6], index: u32) -> Option<Vec<usize>> {
    let want_mac = mac
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    lines.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let field = |name: &str| {
            f.iter()
                .position(|&x| x == name)
                .and_then(|i| f.get(i + 1).copied())
        };
        if !field("board")?.eq_ignore_ascii_case(&want_mac) {
            return None;
        }
        if field("ep")?.parse::<u32>().ok()? != index {
            return None;
        }
        // The kernel's affinity text groups 32-bit words with commas: `00000000,00000003`.
        let mask = field("mask")?.trim_start_matches("0x").replace(',', "");
        let mask = u128::from_str_radix(&mask, 16).ok()?;
        let cpus: Vec<usize> = (0..128).filter(|c| mask >> c & 1 == 1).collect();
        (!cpus.is_empty()).then_some(cpus)
    })
}

/// Applies `OMX_PROCESS_BINDING` for endpoint `index` of the board with MAC `mac`;
/// a binding the kernel refuses is reported once on stderr, not fatal.
pub(crate) fn bind_process(mac: [u8; 6], index: u32) {
    let Some(spec) = text("OMX_PROCESS_BINDING") else {
        return;
    };
    let Some(cpus) = binding_for(&spec, mac, index) else {
        return;
    };
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET bounds-checks against its size.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in &cpus {
            if c < libc::CPU_SETSIZE as usize {
                libc::CPU_SET(c, &mut set);
            }
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        omx_runtime::say!(
            "OMX_PROCESS_BINDING: cannot bind to CPUs {cpus:?}: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// `OMX_ABORT_SLEEPS=S`: before a fatal error ends the process, say its pid and sleep
/// S seconds so that a debugger can attach.
pub(crate) fn sleep_before_abort() {
    let secs = num("OMX_ABORT_SLEEPS");
    if secs > 0 {
        omx_runtime::say!(
            "process {} sleeping {secs} s before it exits (OMX_ABORT_SLEEPS)",
            std::process::id()
        );
        std::thread::sleep(std::time::Duration::from_secs(secs as u64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];

    #[test]
    fn ctxids_need_a_comma() {
        assert_eq!(parse_ctxids("4,60"), Some((4, 60)));
        assert_eq!(parse_ctxids(" 8 , 0"), Some((8, 0)));
        assert_eq!(parse_ctxids("4"), None);
        assert_eq!(parse_ctxids("x,1"), None);
    }

    #[test]
    fn binding_by_index_all_and_file() {
        assert_eq!(binding_for("3,,1", MAC, 0), Some(vec![3]));
        assert_eq!(binding_for("3,,1", MAC, 1), Some(vec![0]));
        assert_eq!(binding_for("3,,1", MAC, 2), Some(vec![1]));
        assert_eq!(binding_for("3,,1", MAC, 3), None);
        assert_eq!(binding_for("all:1", MAC, 7), Some(vec![1]));
        let file = "board 02:00:00:00:00:0a ep 0 irq 33 mask 4\n\
                    board 02:00:00:00:00:0a ep 1 irq 34 mask 0x3\n\
                    board 02:00:00:00:00:0b ep 0 irq 35 mask 1\n\
                    board 02:00:00:00:00:0a ep 3 irq 36 mask 00000001,00000010\n";
        assert_eq!(binding_from_file(file, MAC, 0), Some(vec![2]));
        assert_eq!(binding_from_file(file, MAC, 1), Some(vec![0, 1]));
        assert_eq!(binding_from_file(file, MAC, 2), None);
        assert_eq!(binding_from_file(file, MAC, 3), Some(vec![4, 32]));
    }
}
