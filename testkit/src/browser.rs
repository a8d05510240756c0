//! Debian's headless Chromium for end-to-end tests of the dashboard: the page's DOM
//! after its scripts ran, as a person's browser would build it.
//!
//! The flags are the ones this kind of machine needs: `--no-sandbox` (tests run as
//! root), no GPU, and no background networking (a closed network refuses Chromium's
//! own connections, many at a time), in a fresh profile per call.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where Debian's `chromium` package installs the browser.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// The longest one page load may take, virtual time budget included.
pub const BROWSER_LIMIT: std::time::Duration = std::time::Duration::from_secs(90);

/// The browser, when it is installed (scripts/setup.sh installs it).
pub fn chromium() -> Option<PathBuf> {
    let p = PathBuf::from(CHROMIUM);
    p.is_file().then_some(p)
}

/// Opens `url` in headless Chromium with a new empty profile, lets the page run for
/// `budget_ms` of virtual time (its timers and fetches), and returns the DOM it then
/// has, serialized; with `screenshot`, the same browser also saves what the page then
/// looks like (a 1280 x 900 PNG) to that path, its folder created. Panics with what
/// Chromium said when it fails, or when it is not installed.
pub fn dump_dom(url: &str, budget_ms: u64, screenshot: Option<&Path>) -> String {
    let Some(bin) = chromium() else {
        panic!("{CHROMIUM} is missing: run scripts/setup.sh (it installs Debian's chromium)");
    };
    // A fresh profile per call: the process id and a counter name it (no clock).
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let profile = std::env::temp_dir().join(format!(
        "brook-chromium-{}-{}",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&profile);
    let mut cmd = Command::new(bin);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .arg(format!("--virtual-time-budget={budget_ms}"));
    if let Some(png) = screenshot {
        if let Some(dir) = png.parent() {
            std::fs::create_dir_all(dir)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        }
        // One page load gives both (the login link opens once).
        cmd.arg("--window-size=1280,900")
            .arg(format!("--screenshot={}", png.display()));
    }
    // What it writes goes to files: a pipe would fill while the process is only
    // polled.
    let (dom_path, err_path) = (profile.with_extension("dom"), profile.with_extension("err"));
    let file = |path: &Path| {
        std::fs::File::create(path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()))
    };
    let child = cmd
        .arg("--dump-dom")
        .arg(url)
        .stdout(file(&dom_path))
        .stderr(file(&err_path))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {CHROMIUM}: {e}"));
    // A headless browser that never finishes must not hold the suite: killed at the
    // limit, the test fails saying so.
    let finished = crate::process::wait_bounded(child, BROWSER_LIMIT);
    let _ = std::fs::remove_dir_all(&profile);
    let dom = std::fs::read_to_string(&dom_path).unwrap_or_default();
    let said = std::fs::read_to_string(&err_path).unwrap_or_default();
    let _ = (
        std::fs::remove_file(&dom_path),
        std::fs::remove_file(&err_path),
    );
    let out = finished.unwrap_or_else(|_| {
        panic!(
            "chromium did not finish within {BROWSER_LIMIT:?} on {}: killed; it said: {said}",
            url.split('?').next().unwrap_or(url),
        )
    });
    assert!(
        out.status.success() && !dom.is_empty(),
        "chromium failed ({}): {said}",
        out.status,
    );
    dom
}
