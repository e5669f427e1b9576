//! The wake journal's rules as a sans-I/O core: the fingerprint a wake's key is bound to.
//!
//! `daemon::store` reads and writes the records; this module only decides. It does no I/O,
//! reads no clock and draws no randomness.

use sha2::{Digest, Sha256};

use crate::contract::fingerprint::fingerprint_hex;

/// The fingerprint of a wake's payload, as a journal record stores it and compares it.
///
/// The current form is `contract::fingerprint::fingerprint_hex` of `{"prompt", "source"}`
/// (`source` is `null` when absent): the canonical JSON every fingerprint of this project uses.
/// Records written before the switch hold the legacy form, whose canonical bytes put a comma
/// after every member (`{"prompt":…,"source":…,}`); a stored fingerprint matches when it is
/// either form (DECISION in SPEC PC-6, "wake fingerprints"), so a journal written by an older
/// daemon keeps its idempotency across the upgrade. New records always get the current form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WakeFingerprint {
    current: String,
    legacy: String,
}

impl WakeFingerprint {
    /// The fingerprint of a wake with `prompt` and, when given, `source`.
    pub fn of(prompt: &str, source: Option<&str>) -> Self {
        let value = serde_json::json!({"prompt": prompt, "source": source});
        WakeFingerprint { current: fingerprint_hex(&value), legacy: legacy_hex(prompt, source) }
    }

    /// What a new record stores: the current form (64 lowercase hex digits).
    pub fn hex(&self) -> &str {
        &self.current
    }

    /// Whether a stored fingerprint names this payload, in the current or the legacy form.
    pub fn matches(&self, stored: &str) -> bool {
        stored == self.current || stored == self.legacy
    }
}

/// The legacy form of a wake fingerprint (daemons before the switch to
/// `contract::fingerprint`): SHA-256 of `{"prompt":P,"source":S,}`, the members in key order,
/// each followed by a comma, the values as `serde_json` writes them. Only the wake payload's
/// two scalar members ever went through it, so this fixed shape is all of it that is left.
fn legacy_hex(prompt: &str, source: Option<&str>) -> String {
    let mut b = Vec::with_capacity(prompt.len() + 32);
    b.extend_from_slice(b"{\"prompt\":");
    // Writing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut b, prompt);
    b.extend_from_slice(b",\"source\":");
    let _ = serde_json::to_writer(&mut b, &source);
    b.extend_from_slice(b",}");
    hex::encode(Sha256::digest(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    #[test]
    fn the_current_form_is_the_contracts_canonical_json() {
        let f = WakeFingerprint::of("hello", None);
        assert_eq!(f.hex(), sha(br#"{"prompt":"hello","source":null}"#));
        let f = WakeFingerprint::of("a \"q\"\n", Some("cron"));
        assert_eq!(f.hex(), sha(b"{\"prompt\":\"a \\\"q\\\"\\n\",\"source\":\"cron\"}"));
    }

    #[test]
    fn a_legacy_record_still_matches_and_another_payload_never_does() {
        let f = WakeFingerprint::of("hello", None);
        // The bytes the old canonicalizer hashed, written out by hand.
        let legacy = sha(br#"{"prompt":"hello","source":null,}"#);
        assert_ne!(legacy, f.hex(), "the two forms differ");
        assert!(f.matches(f.hex()));
        assert!(f.matches(&legacy));
        let other = WakeFingerprint::of("hello", Some("x"));
        assert!(!other.matches(&legacy));
        assert!(!other.matches(f.hex()));
        assert!(!WakeFingerprint::of("hello!", None).matches(&legacy));
        assert!(!f.matches(""));
        assert_eq!(
            WakeFingerprint::of("p", Some("s")).legacy,
            sha(br#"{"prompt":"p","source":"s",}"#),
            "source is a string member when given"
        );
    }
}
