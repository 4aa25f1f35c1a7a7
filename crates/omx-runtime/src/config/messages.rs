//! The prefix of the library's messages on stderr (`OMX_VERBOSE_PREFIX`), the one
//! place that writes it: every notice goes through [`say`] (or the `say!` macro).

use std::sync::OnceLock;

/// Default prefix (the original's is `OMX: `; ours names the project).
const DEFAULT: &str = "omx: ";

/// The endpoint a message is about, for the `%e`, `%b` and `%B` conversions.
#[derive(Clone, Copy, Debug)]
pub struct At<'a> {
    pub board: u32,
    pub endpoint: u8,
    /// The board's peer name (`host:board`).
    pub board_name: &'a str,
}

/// Writes `msg` on stderr after the prefix.
pub fn say(at: Option<At>, msg: std::fmt::Arguments) {
    eprintln!("{}{msg}", prefix(at));
}

/// `say(None, format_args!(...))`, or `say(Some(at), ...)` with `at;` first.
#[macro_export]
macro_rules! say {
    ($at:expr; $($arg:tt)*) => {
        $crate::config::messages::say(Some($at), format_args!($($arg)*))
    };
    ($($arg:tt)*) => {
        $crate::config::messages::say(None, format_args!($($arg)*))
    };
}

/// The prefix for a message about `at` (or about no endpoint).
pub fn prefix(at: Option<At>) -> String {
    static SPEC: OnceLock<Option<String>> = OnceLock::new();
    let spec = SPEC.get_or_init(|| super::settings::text("OMX_VERBOSE_PREFIX"));
    match spec {
        None => DEFAULT.to_string(),
        Some(s) => expand(s, at, std::process::id(), &super::system_hostname()),
    }
}

/// `OMX_VERBOSE_PREFIX` expanded: a value starting with `1` is `OMX:<host>:<pid> `;
/// otherwise `%p` pid, `%e` endpoint index, `%b` board index, `%B` board name, `%H`
/// host name (its first 19 characters), `X` for the endpoint conversions when the
/// message is about no endpoint; `%B` and `%H` may be followed by `[from-to]`, a
/// character range (either end may be left out), `%%` is `%`.
pub fn expand(spec: &str, at: Option<At>, pid: u32, host: &str) -> String {
    let host: String = host.chars().take(19).collect();
    if spec.starts_with('1') {
        return format!("OMX:{host}:{pid} ");
    }
    let mut out = String::new();
    let mut chars = spec.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some('p') => out.push_str(&pid.to_string()),
            Some('e') => out.push_str(&at.map_or("X".into(), |a| a.endpoint.to_string())),
            Some('b') => out.push_str(&at.map_or("X".into(), |a| a.board.to_string())),
            Some(k @ ('B' | 'H')) => {
                let whole = match k {
                    'B' => at.map_or("X", |a| a.board_name),
                    _ => host.as_str(),
                };
                let range = if chars.next_if_eq(&'[').is_some() {
                    let r: String = chars.by_ref().take_while(|&c| c != ']').collect();
                    Some(r)
                } else {
                    None
                };
                out.push_str(&substring(whole, range.as_deref()));
            }
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Characters `from` to `to` (inclusive, from 0) of `s`, for a `[from-to]` range.
fn substring(s: &str, range: Option<&str>) -> String {
    let Some(r) = range else {
        return s.to_string();
    };
    let (from, to) = r.split_once('-').unwrap_or((r, r));
    let from = from.trim().parse().unwrap_or(0);
    let to = to.trim().parse().unwrap_or(usize::MAX);
    s.chars()
        .skip(from)
        .take(to.saturating_sub(from).saturating_add(1))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: At = At {
        board: 2,
        endpoint: 7,
        board_name: "node12:2",
    };

    #[test]
    fn conversions_with_and_without_an_endpoint() {
        let host = "a-very-long-machine-hostname";
        assert_eq!(expand("1", None, 42, host), "OMX:a-very-long-machine:42 ");
        assert_eq!(
            expand("[%H %p %b.%e %B] ", Some(AT), 42, "h"),
            "[h 42 2.7 node12:2] "
        );
        assert_eq!(expand("%b.%e %B|", None, 42, "h"), "X.X X|");
        assert_eq!(
            expand("%B[0-5]/%H[2-]/%H[-1]:", Some(AT), 1, host),
            "node12/very-long-machine/a-:"
        );
        assert_eq!(expand("at 100%% %q%", None, 1, host), "at 100% %q%");
    }
}
