//! The YAML job spec loader (src/spec/): parsing and validation, as `brook run`
//! loads a job file before anything runs.
//!
//! What must hold: a spec is refused with a `SpecError` or accepted, without a panic;
//! and an accepted spec keeps being accepted with its paths resolved against a base
//! directory.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(spec) = brook::spec::parse(text) else {
        return;
    };
    let resolved = brook::spec::resolve_paths(spec.clone(), std::path::Path::new("/jobs"));
    if let Ok(valid) = brook::spec::validate(spec) {
        let _ = valid.spec.checkpoint_interval_ms();
        assert!(
            brook::spec::validate(resolved).is_ok(),
            "a valid spec stays valid with its paths resolved"
        );
    }
});
