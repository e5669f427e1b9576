//! The response budget: the compact JSON serialization of a result's `data` must not exceed
//! the caller's byte budget (SPEC §4.5 "never send a line over `maxResponseBytes`").

use serde::Serialize;
use serde_json::Value;

use crate::contract::types::tool_adapter::{FsListData, FsListEntry, FsSearchData, FsSearchMatch};
use crate::contract::{AdapterCode, AdapterError};

/// The refusal when not even one entry, match or character fits.
pub(super) fn too_large() -> AdapterError {
    AdapterError::new(AdapterCode::ResponseTooLarge, "the result does not fit the response size limit")
}

/// The `data` of a result, from the generated `Fs*Data` value that describes it. Serializing
/// a generated type into a `Value` cannot fail (no maps with non-string keys, no floats).
pub(super) fn data<T: Serialize>(typed: &T) -> Value {
    serde_json::to_value(typed).unwrap_or(Value::Null)
}

/// A generated string type (a name, path, timestamp, digest, match text) from a string the
/// adapter built. The adapter only builds strings that satisfy the contract; one that does
/// not is refused (`io_error`) rather than sent.
pub(super) fn typed<T: TryFrom<String>>(s: String) -> Result<T, AdapterError> {
    T::try_from(s).map_err(|_| AdapterError::new(AdapterCode::IoError, "a result value broke the contract"))
}

/// Compact JSON length of `v`.
pub(super) fn json_len<T: Serialize + ?Sized>(v: &T) -> usize {
    // Counted, not written. Serializing a `Value` cannot fail (its keys are strings).
    crate::wire::json_len(v).unwrap_or(usize::MAX)
}

/// Refuse `data` unless it fits `budget`.
pub(super) fn ensure_fits(data: &Value, budget: usize) -> Result<(), AdapterError> {
    if json_len(data) <= budget {
        Ok(())
    } else {
        Err(too_large())
    }
}

/// Length of `c` once escaped inside a JSON string by `serde_json` (compact form).
pub(super) fn escaped_char_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{08}' | '\t' | '\n' | '\u{0c}' | '\r' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// A bounded array result (`fs.list` entries, `fs.search` matches): at most `limit` items of
/// type `T`, and the `data` object `D` that `make(items, truncated)` builds at most `budget`
/// bytes.
pub(super) struct Bounded<T, D> {
    make: fn(Vec<T>, bool) -> D,
    items: Vec<T>,
    /// Sum of the items' lengths plus the commas between them.
    items_len: usize,
    limit: usize,
    budget: usize,
    truncated: bool,
    /// Something was left out that is not cut by the limit or budget (a tree search that
    /// skipped a file it cannot report): reported as `truncated`, accepting more items.
    incomplete: bool,
}

/// `fs.list` entries.
pub(super) type Entries = Bounded<FsListEntry, FsListData>;
/// `fs.search` matches.
pub(super) type Matches = Bounded<FsSearchMatch, FsSearchData>;

impl Entries {
    /// An empty `fs.list` result.
    pub(super) fn entries(limit: usize, budget: usize) -> Self {
        Bounded::new(|entries, truncated| FsListData { entries, truncated }, limit, budget)
    }
}

impl Matches {
    /// An empty `fs.search` result.
    pub(super) fn matches(limit: usize, budget: usize) -> Self {
        Bounded::new(|matches, truncated| FsSearchData { matches, truncated }, limit, budget)
    }
}

impl<T: Serialize, D: Serialize> Bounded<T, D> {
    /// An empty collection.
    pub(super) fn new(make: fn(Vec<T>, bool) -> D, limit: usize, budget: usize) -> Self {
        Self { make, items: Vec::new(), items_len: 0, limit, budget, truncated: false, incomplete: false }
    }

    fn base_len(&self, truncated: bool) -> usize {
        json_len(&(self.make)(Vec::new(), truncated))
    }

    /// Whether more items are still wanted.
    pub(super) fn wants_more(&self) -> bool {
        !self.truncated
    }

    /// How many more items can still be accepted under `limit`.
    pub(super) fn remaining(&self) -> usize {
        self.limit - self.items.len()
    }

    /// Offer the next item in order. Returns `false` (and marks the result truncated) when it
    /// is cut by the limit or the budget; no later item is accepted after that.
    pub(super) fn push(&mut self, item: T) -> bool {
        if self.truncated {
            return false;
        }
        if self.items.len() >= self.limit {
            self.truncated = true;
            return false;
        }
        let len = json_len(&item) + usize::from(!self.items.is_empty());
        // `truncated:true` is the shorter form; the final check in `finish` settles the rest.
        if self.base_len(true).saturating_add(self.items_len).saturating_add(len) > self.budget {
            self.truncated = true;
            return false;
        }
        self.items_len += len;
        self.items.push(item);
        true
    }

    /// Mark the result incomplete (`truncated: true`) without cutting it.
    pub(super) fn mark_incomplete(&mut self) {
        self.incomplete = true;
    }

    /// The `data` object, or `response_too_large` when not even one item (or, with no item
    /// at all, not even the empty result) fits.
    pub(super) fn finish(mut self) -> Result<Value, AdapterError> {
        while self.base_len(self.truncated || self.incomplete) + self.items_len > self.budget {
            let Some(last) = self.items.pop() else { break };
            self.items_len -= json_len(&last) + usize::from(!self.items.is_empty());
            self.truncated = true;
        }
        let flag = self.truncated || self.incomplete;
        let total = self.base_len(flag) + self.items_len;
        if total > self.budget || (self.items.is_empty() && self.truncated) {
            return Err(too_large());
        }
        let data = data(&(self.make)(self.items, flag));
        debug_assert_eq!(json_len(&data), total);
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map};

    fn entries(items: Vec<Value>, truncated: bool) -> Value {
        let mut m = Map::new();
        m.insert("entries".into(), Value::Array(items));
        m.insert("truncated".into(), truncated.into());
        Value::Object(m)
    }

    fn matches(items: Vec<Value>, truncated: bool) -> Value {
        json!({"matches": items, "truncated": truncated})
    }

    #[test]
    fn escaped_lengths_match_serde_json() {
        let mut all: Vec<char> = (0u32..0x300).filter_map(char::from_u32).collect();
        all.extend(['\u{2028}', '\u{2029}', '\u{fffd}', '\u{1f600}', '\u{10ffff}', '\u{7f}']);
        for c in all {
            let s = c.to_string();
            let got = serde_json::to_string(&s).unwrap().len() - 2;
            assert_eq!(escaped_char_len(c), got, "{:?}", c);
        }
    }

    #[test]
    fn bounded_never_exceeds_the_budget() {
        let items: Vec<Value> = (0..20).map(|i| json!({"name": "x".repeat(i), "n": i})).collect();
        let full = json_len(&json!({"entries": items, "truncated": false}));
        let mut prev = 0;
        for budget in 0..full + 3 {
            let mut b = Bounded::new(entries, 100, budget);
            for it in &items {
                if !b.push(it.clone()) {
                    break;
                }
            }
            match b.finish() {
                Ok(v) => {
                    assert!(json_len(&v) <= budget);
                    let n = v["entries"].as_array().unwrap().len();
                    assert!(n >= prev);
                    prev = n;
                    assert_eq!(v["truncated"], n < items.len());
                }
                Err(e) => {
                    assert_eq!(e.code, AdapterCode::ResponseTooLarge);
                    assert!(budget < json_len(&json!({"entries": [items[0]], "truncated": true})));
                }
            }
        }
        assert_eq!(prev, items.len());
    }

    #[test]
    fn empty_result_fits_or_refuses() {
        assert!(Bounded::new(matches, 10, 5).finish().is_err());
        assert!(Matches::matches(10, 5).finish().is_err());
        let v = Bounded::new(matches, 10, 100).finish().unwrap();
        assert_eq!(v, json!({"matches": [], "truncated": false}));
        let v = Matches::matches(10, 100).finish().unwrap();
        assert_eq!(v, json!({"matches": [], "truncated": false}));
    }
}
