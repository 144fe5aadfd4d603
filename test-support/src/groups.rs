//! The host's groups that test cases name: created when missing, never removed.

use std::process::Command;
use std::sync::Mutex;

use crate::Error;

/// Serialises the `groupadd` runs of one test process: two threads adding the same group at once could
/// otherwise both find it missing and one fail on the other's lock of `/etc/group`.
static GROUPADD: Mutex<()> = Mutex::new(());

/// Makes sure every group of `names` exists (`groupadd -f`, which succeeds for an existing group).
/// Needs root.
pub fn ensure_groups<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<(), Error> {
    let _one_at_a_time = GROUPADD
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    for group in names {
        let failed = |message: String| Error::Group {
            group: group.to_string(),
            message,
        };
        let out = Command::new("groupadd")
            .args(["-f", group])
            .output()
            .map_err(|e| failed(e.to_string()))?;
        if !out.status.success() {
            return Err(failed(format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_group_name_is_an_error_naming_it() {
        // groupadd refuses the name before it needs any privilege or lock.
        let err = ensure_groups(["bad name:"]).expect_err("refused");
        assert!(err.to_string().contains("groupadd -f bad name:"), "{err}");
    }

    #[test]
    fn no_names_is_nothing_to_do() {
        ensure_groups([]).expect("nothing to create");
    }
}
