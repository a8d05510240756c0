//! What a job left on disk: its newest complete checkpoint and the rows of its file
//! sinks.

use std::path::Path;

/// The id of the newest complete checkpoint (`chk-<id>` with its `_metadata`) in
/// `dir`, if any.
pub fn latest_checkpoint(dir: &Path) -> Option<u64> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.path().join("_metadata").exists())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("chk-")?.parse().ok())
        .max()
}

/// The lines of every file sink output `{stem}*.jsonl` in `dir` (`stem.jsonl` of
/// parallelism 1 and `stem-<i>.jsonl` of the others, not the hidden part files),
/// sorted.
pub fn file_rows(dir: &Path, stem: &str) -> Vec<String> {
    let mut rows: Vec<String> = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') && name.starts_with(stem) && name.ends_with(".jsonl") {
            let text = std::fs::read_to_string(e.path()).expect("read an output");
            rows.extend(text.lines().map(str::to_string));
        }
    }
    rows.sort();
    rows
}
