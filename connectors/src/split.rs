//! What the sources share about their splits: finding a split's checkpointed position
//! among those a restore hands the reader (keyed by split id, see
//! [`brook_core::source::Split`]), decoded by the source's own position format.

use std::collections::HashMap;

use crate::error::ConnectorError;

/// The position checkpointed for split `id`, decoded with `decode`; `None` when the
/// checkpoint holds none for it (a split new since then starts as in a fresh job).
///
/// # Errors
/// [`ConnectorError::Config`] (setting `restore`) when `decode` rejects the bytes: the
/// checkpoint holds a position this source did not write.
pub(crate) fn restored_position<P>(
    positions: &HashMap<String, Vec<u8>>,
    id: &str,
    decode: impl FnOnce(&[u8]) -> Option<P>,
) -> Result<Option<P>, ConnectorError> {
    let Some(bytes) = positions.get(id) else {
        return Ok(None);
    };
    decode(bytes).map(Some).ok_or_else(|| {
        ConnectorError::config(
            "restore",
            format!("the checkpointed position of {id} is not one this source wrote"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn positions() -> HashMap<String, Vec<u8>> {
        HashMap::from([("t/0".to_string(), vec![7]), ("t/1".to_string(), vec![])])
    }

    fn one_byte(b: &[u8]) -> Option<u8> {
        match b {
            [x] => Some(*x),
            _ => None,
        }
    }

    #[test]
    fn a_checkpointed_position_is_decoded() {
        let got = restored_position(&positions(), "t/0", one_byte)
            .ok()
            .flatten();
        assert_eq!(got, Some(7));
    }

    #[test]
    fn a_split_without_a_position_has_none() {
        let got = restored_position(&positions(), "t/2", one_byte)
            .ok()
            .flatten();
        assert_eq!(got, None);
    }

    #[test]
    fn a_position_the_source_did_not_write_names_the_split() {
        let err = restored_position(&positions(), "t/1", one_byte).err();
        assert_eq!(
            err.map(|e| e.to_string()).as_deref(),
            Some("invalid restore: the checkpointed position of t/1 is not one this source wrote")
        );
    }
}
