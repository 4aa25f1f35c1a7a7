//! Replays every stored fuzz corpus file (fuzz/corpus/, outside the workspace) through
//! the properties the fuzz targets check, so `make test` runs them without a fuzzer.

use std::path::PathBuf;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: empty corpus", dir.display());
    files
        .into_iter()
        .map(|p| {
            let data = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, data)
        })
        .collect()
}

/// Runs `check` on every file of the corpus of `target`, naming the file that fails.
fn replay(target: &str, check: fn(&[u8])) -> usize {
    let files = corpus(target);
    for (path, data) in &files {
        let outcome = std::panic::catch_unwind(|| check(data));
        assert!(outcome.is_ok(), "corpus file {} fails", path.display());
    }
    files.len()
}

#[test]
fn decode_corpus_replays() {
    let n = replay("decode", omx_sim::hostile::decode_roundtrip);
    println!("{n} decode corpus files replayed");
}

#[test]
fn engine_corpus_replays() {
    let n = replay("engine", omx_sim::hostile::engine_frames);
    println!("{n} engine corpus files replayed");
}
