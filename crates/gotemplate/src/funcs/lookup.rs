//! Finding a function by name, once, when a template is parsed: the parse tree holds the row.

use std::sync::OnceLock;

use super::func::Func;
use super::{builtins, istio, sprig};

/// The tables in the order Go finds a name: the template's `FuncMap` before the built-ins
/// (`text/template` `exec.go` `findFunction`), and in that map Istio's functions over sprig's (Istio's
/// `inject.go` `parseDryTemplate` installs `InjectionFuncmap` after `sprig.TxtFuncMap`).
const TABLES: [&[Func]; 3] = [istio::FUNCS, sprig::FUNCS, builtins::FUNCS];

/// The function `name`, or None outside the supported subset.
pub(crate) fn lookup(name: &str) -> Option<&'static Func> {
    let rows = by_name();
    let at = rows.binary_search_by(|f| f.name.cmp(name)).ok()?;
    Some(rows[at])
}

/// Every row a name finds, sorted by name for one binary search across the three tables (built on the
/// first parse; the tables themselves are in any order).
fn by_name() -> &'static [&'static Func] {
    static ROWS: OnceLock<Vec<&'static Func>> = OnceLock::new();
    ROWS.get_or_init(|| {
        let mut rows: Vec<&'static Func> = Vec::new();
        for f in TABLES.into_iter().flatten() {
            // The first table that has a name wins, as in Go.
            if !rows.iter().any(|r| r.name == f.name) {
                rows.push(f);
            }
        }
        rows.sort_by_key(|f| f.name);
        rows
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_found_and_none_is_shadowed() {
        for f in TABLES.into_iter().flatten() {
            assert_eq!(lookup(f.name).map(|found| found.name), Some(f.name));
            let rows = TABLES.into_iter().flatten().filter(|g| g.name == f.name);
            // A row an earlier row or table shadows would never be called.
            assert_eq!(rows.count(), 1, "{} is defined twice", f.name);
        }
        assert!(lookup("nosuchfunction").is_none());
        assert!(lookup("").is_none());
    }
}
