//! `--set key=value`: changes a spec before it is checked.
//!
//! The key is a dotted path. Lists of named things (`sources`, `steps`, `sinks`) are
//! addressed by name or by index: `sources.sales.path=other.jsonl`,
//! `steps.0.filter='price > 100'`, `parallelism=4`. The value is read as YAML, so
//! numbers and booleans keep their type.

use serde_norway::Value;

use super::SpecError;

/// Applies `key=value` to a parsed YAML document.
///
/// # Errors
/// [`SpecError`] naming the key when it has no `=`, the path does not exist (except a
/// missing last map key, which is added) or the value is not YAML.
pub fn apply_set(doc: &mut Value, assignment: &str) -> Result<(), SpecError> {
    let field = format!("--set {assignment}");
    let (key, raw) = assignment
        .split_once('=')
        .ok_or_else(|| SpecError::new(&field, "expected KEY=VALUE"))?;
    let value: Value = serde_norway::from_str(raw)
        .map_err(|e| SpecError::new(&field, format!("value is not YAML: {e}")))?;
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(SpecError::new(&field, "empty path segment"));
    }
    let mut node = doc;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        node = match node {
            Value::Mapping(m) => {
                let k = Value::String((*part).to_string());
                if last {
                    m.insert(k, value);
                    return Ok(());
                }
                m.get_mut(&k).ok_or_else(|| {
                    SpecError::new(&field, format!("{} does not exist", parts[..=i].join(".")))
                })?
            }
            Value::Sequence(seq) => {
                let idx = match part.parse::<usize>() {
                    Ok(n) if n < seq.len() => n,
                    _ => seq
                        .iter()
                        .position(|e| e.get("name").and_then(Value::as_str) == Some(part))
                        .ok_or_else(|| {
                            SpecError::new(
                                &field,
                                format!(
                                    "no element named or numbered {part:?} in {}",
                                    parts[..i].join(".")
                                ),
                            )
                        })?,
                };
                if last {
                    seq[idx] = value;
                    return Ok(());
                }
                &mut seq[idx]
            }
            _ => {
                return Err(SpecError::new(
                    &field,
                    format!("{} is not a map or a list", parts[..i].join(".")),
                ))
            }
        };
    }
    Ok(())
}
