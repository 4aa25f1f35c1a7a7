//! The one skip rule of the Rust integration tests, included by their common modules
//! (`#[path]`), as tests/runner.sh is for the shell suites: a test that cannot run here
//! says so and why, and is counted by `make test` (lines appended to `$OMX_SKIP_LOG`);
//! under `CI=true` or `OMX_TEST_STRICT=1` a skip is a failure, so a CI run never goes
//! green with tests that did not run.

use std::io::Write;

/// True under `CI=true` or `OMX_TEST_STRICT=1`.
pub fn strict_tests() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("OMX_TEST_STRICT").is_ok_and(|v| v == "1")
}

/// Reports the calling test as skipped for `reason` and returns true (the test then
/// returns early); panics instead under `CI=true` or `OMX_TEST_STRICT=1`.
pub fn skip_test(reason: &str) -> bool {
    let current = std::thread::current();
    let name = current.name().unwrap_or("?");
    if strict_tests() {
        panic!("{name} skipped ({reason}), and skips fail under CI=true or OMX_TEST_STRICT=1");
    }
    let line = format!("SKIP {name}: {reason}\n");
    print!("{line}");
    if let Some(path) = std::env::var_os("OMX_SKIP_LOG") {
        // One append per line: parallel tests do not interleave.
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path);
        if let Ok(mut f) = file {
            let _ = f.write_all(line.as_bytes());
        }
    }
    true
}
