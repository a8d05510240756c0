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
    let out = cmd
        .arg("--dump-dom")
        .arg(url)
        .output()
        .unwrap_or_else(|e| panic!("cannot start {CHROMIUM}: {e}"));
    let _ = std::fs::remove_dir_all(&profile);
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && !dom.is_empty(),
        "chromium failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    dom
}
