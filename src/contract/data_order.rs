//! The order and time rules a successful result's data keeps by itself (PC-5.3.list,
//! PC-5.3.search, PC-5.3.stat), spelled once for both readers of an adapter's output: the typed
//! judge (`adapter_output::data_obligation`) and the one-pass tape
//! (`onepass::accept_adapter_output`).

use std::collections::HashSet;

/// PC-5.2 / PC-5.3.stat: a `modifiedAt` (of the pattern's form) names a real UTC time.
pub fn is_real_time(t: &str) -> bool {
    super::text::utc_instant(t).is_some()
}

/// PC-5.3.list: the index of the first name that does not sort bytewise strictly after the
/// one before it (out of order, or the same name twice); `None` when they all do.
pub fn first_unsorted<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<usize> {
    let mut prev: Option<&str> = None;
    for (i, n) in names.into_iter().enumerate() {
        if prev.is_some_and(|p| p.as_bytes() >= n.as_bytes()) {
            return Some(i);
        }
        prev = Some(n);
    }
    None
}

/// PC-5.3.search over (path, line, column) in answer order: the index of the first match that
/// breaks the order, and whether it is its file's matches being split up (`true`: the path
/// was left before) rather than one file's out of order (`false`: not strictly after the
/// match before it). Which file comes first is the walk's (and its case's) business.
pub fn first_out_of_order<'a>(matches: impl IntoIterator<Item = (&'a str, u64, u64)>) -> Option<(usize, bool)> {
    let mut left: HashSet<&str> = HashSet::new();
    let mut prev: Option<(&str, u64, u64)> = None;
    for (i, (path, line, column)) in matches.into_iter().enumerate() {
        match prev {
            Some((p, l, c)) if p == path && (l, c) >= (line, column) => return Some((i, false)),
            Some((p, _, _)) if p == path => {}
            Some((p, _, _)) => {
                left.insert(p);
                if left.contains(path) {
                    return Some((i, true));
                }
            }
            None => {}
        }
        prev = Some((path, line, column));
    }
    None
}
