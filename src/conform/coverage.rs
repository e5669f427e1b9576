//! Coverage as data (issue 24): which clause each case checks, with which technique, and
//! what the catalogues leave uncovered.
//!
//! - [`Coverage`]: clause × technique × case ids of one catalogue (`pi-conform adapter --list
//!   --coverage`, `pi-conform daemon --list --coverage`, human or JSON).
//! - [`Enumerations`]: `conformance/enumerations.json`, each MUST sentence of
//!   `conformance/SPEC.md` that enumerates forms, conditions, checks, echoed fields or limits,
//!   with the case ids covering each item per side (adapter suite, daemon suite).
//! - [`gaps`]: what `tests/coverage.rs` fails on — an entry naming no technique, a clause with
//!   MUST cases but no negative case, an enumerated item without its case (or a limit without
//!   its at-limit case), a case id the enumerations name that no catalogue holds.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::case::{CaseMeta, Level, Technique};

/// The enumerations, built in.
pub const ENUMERATIONS: &str = include_str!("../../conformance/enumerations.json");

/// The techniques of a replayed golden vector, from its verdict and its id. The vector ids
/// follow one naming convention (`vectors/README.md`): `.valid` ends an accepted vector, a
/// size or count in the id (`adapter-id.128.valid`, `component-256-bytes`, `message-1025`)
/// sits at or one past the limit of its field, and spelling variants say so (`escaped`,
/// `integral-float`, `case-variant`, `non-ascii`, multi-unit characters).
pub fn vector_techniques(id: &str, valid: bool) -> Vec<Technique> {
    let mut t = vec![if valid { Technique::Positive } else { Technique::Negative }];
    // A count or size at or past a limit: a number of at least 32 among the id's words (ids,
    // versions and generations below that are not limits), `max`, or an explicit `equals`,
    // `one-below`, `plus-one`, `2pow53`.
    let at_limit = id
        .split(['.', '-'])
        .any(|w| w.parse::<u64>().is_ok_and(|n| n >= 32) || w == "max" || w == "min" || w == "2pow53")
        || ["equals", "one-below", "plus-one"].iter().any(|w| id.contains(w));
    // `…-default-limits`: the size is measured against other limits than the one it names.
    let at_limit = at_limit && !id.contains("default-limits");
    if at_limit {
        t.push(if valid { Technique::Boundary } else { Technique::OnePast });
    }
    let spelled = [
        "escaped",
        "integral-float",
        "case-variant",
        "wrong-case",
        "upper-case",
        "non-ascii",
        "emoji",
        "euro",
        "astral",
        "spelling",
    ];
    if spelled.iter().any(|w| id.contains(w)) {
        t.push(Technique::Spelling);
    }
    t
}

/// Clause × technique × case ids of one catalogue.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Coverage {
    /// Per clause: per technique, the case ids applying it.
    pub clauses: BTreeMap<String, ClauseCoverage>,
}

/// The coverage of one clause.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ClauseCoverage {
    /// How many of its cases are MUST in this run.
    pub must: usize,
    /// How many are SHOULD.
    pub should: usize,
    /// Per technique (catalogue word), the case ids.
    pub techniques: BTreeMap<Technique, Vec<String>>,
}

impl Coverage {
    /// The coverage of `catalogue`.
    pub fn of(catalogue: &[CaseMeta]) -> Coverage {
        let mut c = Coverage::default();
        for m in catalogue {
            let e = c.clauses.entry(m.clause.clone()).or_default();
            match m.level {
                Level::Must => e.must += 1,
                Level::Should => e.should += 1,
            }
            for t in &m.techniques {
                e.techniques.entry(*t).or_default().push(m.id.clone());
            }
        }
        c
    }

    /// The JSON form (`--format json`): `{"clauses": {clause: {must, should, techniques:
    /// {technique: [ids]}}}, "techniques": [the vocabulary]}`.
    pub fn json(&self) -> Value {
        let clauses: serde_json::Map<String, Value> = self
            .clauses
            .iter()
            .map(|(k, c)| {
                let t: serde_json::Map<String, Value> =
                    c.techniques.iter().map(|(t, ids)| (t.as_str().to_string(), json!(ids))).collect();
                (k.clone(), json!({"must": c.must, "should": c.should, "techniques": t}))
            })
            .collect();
        json!({
            "techniques": Technique::ALL.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
            "clauses": clauses,
        })
    }

    /// The human table: one row per clause with the number of cases per technique, then per
    /// clause the case ids of each technique.
    pub fn human(&self) -> String {
        let mut out = String::new();
        let abbrev = ["pos", "neg", "bound", "1past", "state", "spell", "fixt", "life"];
        let _ = write!(out, "{:<16} {:>4} {:>6}", "clause", "MUST", "SHOULD");
        for a in abbrev {
            let _ = write!(out, " {a:>5}");
        }
        out.push('\n');
        for (k, c) in &self.clauses {
            let _ = write!(out, "{k:<16} {:>4} {:>6}", c.must, c.should);
            for t in Technique::ALL {
                let n = c.techniques.get(&t).map_or(0, Vec::len);
                let _ = write!(out, " {:>5}", if n == 0 { "-".to_string() } else { n.to_string() });
            }
            out.push('\n');
        }
        out.push('\n');
        for (k, c) in &self.clauses {
            for (t, ids) in &c.techniques {
                let _ = writeln!(out, "{k} {}: {}", t.as_str(), ids.join(" "));
            }
        }
        out
    }
}

/// Which suite a case or an enumerated item belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The adapter suite (`pi-conform adapter`, `selftest`).
    Adapter,
    /// The daemon suite (`pi-conform daemon`).
    Daemon,
}

impl Side {
    /// `adapter` or `daemon`.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Adapter => "adapter",
            Side::Daemon => "daemon",
        }
    }
}

/// `conformance/enumerations.json`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Enumerations {
    /// What the file is.
    #[serde(rename = "$comment", default)]
    pub comment: String,
    /// The enumerating sentences.
    pub enumerations: Vec<Enumeration>,
}

/// One MUST sentence that lists several forms, conditions, checks, fields or limits.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Enumeration {
    /// Stable id (`path-refusal-forms`).
    pub id: String,
    /// The clause holding the sentence.
    pub clause: String,
    /// The sentence, summarized.
    pub sentence: String,
    /// The suites the sentence binds (each item needs a case on each).
    pub sides: Vec<Side>,
    /// The technique a covering case must apply (`boundary` for a limit); none: any case.
    #[serde(default)]
    pub technique: Option<Technique>,
    /// The items.
    pub items: Vec<Item>,
}

/// One item of an enumeration and its cases per side.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Item {
    /// The item, in a few words.
    pub item: String,
    /// Adapter-suite case ids covering it.
    #[serde(default)]
    pub adapter: Vec<String>,
    /// Daemon-suite case ids covering it.
    #[serde(default)]
    pub daemon: Vec<String>,
}

impl Item {
    fn cases(&self, side: Side) -> &[String] {
        match side {
            Side::Adapter => &self.adapter,
            Side::Daemon => &self.daemon,
        }
    }
}

impl Enumerations {
    /// Parse (an unknown key, side or technique is an error).
    pub fn parse(text: &str) -> Result<Enumerations, String> {
        let e: Enumerations = serde_json::from_str(text).map_err(|e| format!("enumerations: {e}"))?;
        let mut ids = BTreeSet::new();
        for en in &e.enumerations {
            if !ids.insert(en.id.as_str()) {
                return Err(format!("enumerations: duplicate id {}", en.id));
            }
        }
        Ok(e)
    }

    /// The built-in enumerations.
    pub fn built_in() -> Enumerations {
        Self::parse(ENUMERATIONS).expect("conformance/enumerations.json is valid")
    }
}

/// One coverage gap: a stable key (what an allowlist names) and why.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Gap {
    /// `untagged:<id>`, `no-negative:<side>:<clause>`, `uncovered:<enum>/<item>:<side>`,
    /// `no-<technique>:<enum>/<item>:<side>`, `unknown-case:<enum>/<item>:<side>:<id>`.
    pub key: String,
    /// The sentence a reader acts on.
    pub why: String,
}

/// Every gap of the two catalogues against `enums`. `clauses` lists the clause ids whose MUST
/// cases must include a negative one (the clauses with a MUST case in the suite, unless a
/// clause has none).
pub fn gaps(adapter: &[CaseMeta], daemon: &[CaseMeta], enums: &Enumerations) -> Vec<Gap> {
    let mut out = Vec::new();
    for (side, cat) in [(Side::Adapter, adapter), (Side::Daemon, daemon)] {
        for m in cat.iter().filter(|m| m.techniques.is_empty()) {
            out.push(Gap {
                key: format!("untagged:{}", m.id),
                why: format!("{} case {} names no technique", side.as_str(), m.id),
            });
        }
        let mut must_clauses: BTreeSet<&str> = BTreeSet::new();
        let mut negative: BTreeSet<&str> = BTreeSet::new();
        for m in cat {
            if m.level == Level::Must {
                must_clauses.insert(&m.clause);
            }
            if m.techniques.contains(&Technique::Negative) {
                negative.insert(&m.clause);
            }
        }
        for c in must_clauses.difference(&negative) {
            out.push(Gap {
                key: format!("no-negative:{}:{c}", side.as_str()),
                why: format!("the {} suite has MUST cases of {c} but no negative one", side.as_str()),
            });
        }
    }
    for en in &enums.enumerations {
        for item in &en.items {
            for side in &en.sides {
                let cat = match side {
                    Side::Adapter => adapter,
                    Side::Daemon => daemon,
                };
                let at = format!("{}/{}:{}", en.id, item.item, side.as_str());
                let ids = item.cases(*side);
                if ids.is_empty() {
                    out.push(Gap {
                        key: format!("uncovered:{at}"),
                        why: format!(
                            "{} ({}): the item {:?} has no {} case",
                            en.id,
                            en.clause,
                            item.item,
                            side.as_str()
                        ),
                    });
                    continue;
                }
                let mut found = Vec::new();
                for id in ids {
                    match cat.iter().find(|m| &m.id == id) {
                        Some(m) => found.push(m),
                        None => out.push(Gap {
                            key: format!("unknown-case:{at}:{id}"),
                            why: format!("{}: {id} is not a case of the {} suite", en.id, side.as_str()),
                        }),
                    }
                }
                if let Some(t) = en.technique {
                    if !found.is_empty() && !found.iter().any(|m| m.techniques.contains(&t)) {
                        out.push(Gap {
                            key: format!("no-{}:{at}", t.as_str()),
                            why: format!(
                                "{} ({}): no {} case of the item {:?} applies {}",
                                en.id,
                                en.clause,
                                side.as_str(),
                                item.item,
                                t.as_str()
                            ),
                        });
                    }
                }
            }
        }
    }
    for (side, cat) in [(Side::Adapter, adapter), (Side::Daemon, daemon)] {
        let mut seen = BTreeSet::new();
        for m in cat {
            if !seen.insert(&m.id) {
                out.push(Gap {
                    key: format!("duplicate:{}:{}", side.as_str(), m.id),
                    why: format!("the {} catalogue lists {} twice", side.as_str(), m.id),
                });
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(id: &str, clause: &str, level: Level, t: &[Technique]) -> CaseMeta {
        CaseMeta {
            id: id.into(),
            clause: clause.into(),
            level,
            tags: vec![],
            requirement: String::new(),
            accepted: vec![],
            techniques: t.to_vec(),
            level_with_grant: None,
        }
    }

    fn enums(text: &str) -> Enumerations {
        Enumerations::parse(text).unwrap()
    }

    #[test]
    fn a_must_clause_without_a_negative_case_is_a_gap() {
        let cat = vec![case("a.ok", "PC-5.1", Level::Must, &[Technique::Positive])];
        let e = enums(r#"{"enumerations": []}"#);
        let g = gaps(&cat, &[], &e);
        assert_eq!(g.iter().map(|g| g.key.as_str()).collect::<Vec<_>>(), ["no-negative:adapter:PC-5.1"]);
        let mut fixed = cat.clone();
        fixed.push(case("a.bad", "PC-5.1", Level::Must, &[Technique::Negative]));
        assert!(gaps(&fixed, &[], &e).is_empty());
        // A SHOULD-only clause needs none.
        let should = vec![case("a.s", "PC-9", Level::Should, &[Technique::Positive])];
        assert!(gaps(&should, &[], &e).is_empty());
    }

    #[test]
    fn an_item_without_its_case_a_limit_without_boundary_and_an_unknown_id_are_gaps() {
        let cat = vec![
            case("a.max", "PC-5.3", Level::Must, &[Technique::Positive, Technique::Negative]),
            case("a.untagged", "PC-5.3", Level::Should, &[]),
        ];
        let e = enums(
            r#"{"enumerations": [{"id": "limits", "clause": "PC-5.3", "sentence": "s", "sides": ["adapter", "daemon"],
                "technique": "boundary",
                "items": [{"item": "maxEntries", "adapter": ["a.max"]}, {"item": "maxResults", "adapter": ["a.gone"], "daemon": []}]}]}"#,
        );
        let keys: Vec<String> = gaps(&cat, &[], &e).into_iter().map(|g| g.key).collect();
        assert_eq!(
            keys,
            [
                "no-boundary:limits/maxEntries:adapter",
                "uncovered:limits/maxEntries:daemon",
                "uncovered:limits/maxResults:daemon",
                "unknown-case:limits/maxResults:adapter:a.gone",
                "untagged:a.untagged",
            ]
        );
    }

    #[test]
    fn an_unknown_technique_word_is_a_load_error() {
        let text = r#"[{"id": "x", "clause": "PC-1", "level": "MUST", "tags": [], "requirement": "r",
            "accepted": ["ok"], "techniques": ["positive", "fuzzy"]}]"#;
        let e = serde_json::from_str::<Vec<CaseMeta>>(text).unwrap_err().to_string();
        assert!(e.contains("unknown variant `fuzzy`"), "{e}");
        let ok = text.replace("\"fuzzy\"", "\"one-past\"");
        let cat: Vec<CaseMeta> = serde_json::from_str(&ok).unwrap();
        assert_eq!(cat[0].techniques, [Technique::Positive, Technique::OnePast]);
        assert!(Enumerations::parse(
            r#"{"enumerations": [{"id": "x", "clause": "c", "sentence": "s",
            "sides": ["adapter"], "technique": "fuzzy", "items": []}]}"#
        )
        .is_err());
    }

    #[test]
    fn vector_techniques_follow_the_verdict_and_the_id() {
        use Technique::*;
        assert_eq!(vector_techniques("desc.adapter-id.128.valid", true), [Positive, Boundary]);
        assert_eq!(vector_techniques("desc.adapter-id.129", false), [Negative, OnePast]);
        assert_eq!(vector_techniques("path.adapter.component-256-bytes", false), [Negative, OnePast]);
        assert_eq!(
            vector_techniques("path.adapter.component-255-bytes-non-ascii.valid", true),
            [Positive, Boundary, Spelling]
        );
        assert_eq!(vector_techniques("frame.result.error.message-1025", false), [Negative, OnePast]);
        assert_eq!(vector_techniques("cmd.version.2-0.valid", true), [Positive]);
        assert_eq!(vector_techniques("cmd.version.10-0", false), [Negative]);
        assert_eq!(vector_techniques("framing.duplicate-key.escaped-spelling", false), [Negative, Spelling]);
        assert_eq!(vector_techniques("cmd.attach.generation.2pow53", false), [Negative, OnePast]);
        assert_eq!(vector_techniques("path.adapter.empty", false), [Negative]);
        assert_eq!(vector_techniques("desc.limits.max-request-bytes.below-min", false), [Negative, OnePast]);
        assert_eq!(vector_techniques("frame.line.request.2049-bytes-default-limits.valid", true), [Positive]);
    }

    #[test]
    fn the_table_and_the_json_name_every_case_under_its_clause_and_technique() {
        let cat = vec![
            case("a.ok", "PC-5.1", Level::Must, &[Technique::Positive]),
            case("a.bad", "PC-5.1", Level::Must, &[Technique::Negative, Technique::Spelling]),
        ];
        let c = Coverage::of(&cat);
        let j = c.json();
        assert_eq!(j["clauses"]["PC-5.1"]["techniques"]["spelling"], json!(["a.bad"]));
        assert_eq!(j["clauses"]["PC-5.1"]["must"], 2);
        let h = c.human();
        assert!(h.contains("PC-5.1 negative: a.bad"), "{h}");
        assert!(h.lines().nth(1).unwrap().starts_with("PC-5.1"), "{h}");
    }
}
