//! The capability handle as a type that cannot leak by accident.

use memchr::memmem::Finder;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use subtle::ConstantTimeEq;

/// A capability handle: the secret that authorises one binding.
///
/// Decoding enforces the schema's shape (32–512 characters of `[A-Za-z0-9_-]`), so the typed
/// layer agrees with the schema.
/// `Debug` and `Display` print `<redacted>`; equality is constant-time in the contents (the
/// length of a handle is not secret: it is fixed by provisioning). The raw value is reachable
/// only through [`CapabilityHandle::expose`], which a grep can audit.
#[derive(Clone)]
pub struct CapabilityHandle {
    raw: String,
    /// A searcher for the handle, built once: every frame and result is scanned for it.
    finder: Finder<'static>,
}

impl CapabilityHandle {
    /// Wrap a raw handle string (no validation: see `contract::descriptor` for the rules).
    pub fn new(raw: impl Into<String>) -> Self {
        let raw = raw.into();
        let finder = Finder::new(raw.as_bytes()).into_owned();
        Self { raw, finder }
    }

    /// The raw handle, for the one place that must send it (`bind`) or compare it.
    pub fn expose(&self) -> &str {
        &self.raw
    }

    /// Constant-time comparison with raw bytes.
    pub fn ct_eq_bytes(&self, other: &[u8]) -> bool {
        let a = self.raw.as_bytes();
        a.len() == other.len() && bool::from(a.ct_eq(other))
    }

    /// Whether `haystack` contains this handle anywhere.
    pub fn occurs_in(&self, haystack: &[u8]) -> bool {
        !self.raw.is_empty() && self.finder.find(haystack).is_some()
    }
}

impl PartialEq for CapabilityHandle {
    fn eq(&self, other: &Self) -> bool {
        self.ct_eq_bytes(other.raw.as_bytes())
    }
}

impl Eq for CapabilityHandle {}

impl std::fmt::Debug for CapabilityHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CapabilityHandle(<redacted>)")
    }
}

impl std::fmt::Display for CapabilityHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Serialize for CapabilityHandle {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.raw)
    }
}

impl<'de> Deserialize<'de> for CapabilityHandle {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if (32..=512).contains(&s.len()) && crate::contract::text::is_base64url(&s) {
            Ok(Self::new(s))
        } else {
            // The message never carries the value.
            Err(serde::de::Error::custom("capabilityHandle must be 32-512 base64url characters"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_redact() {
        let h = CapabilityHandle::new("aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_-AB");
        assert_eq!(format!("{h}"), "<redacted>");
        assert!(!format!("{h:?}").contains("aBcD"));
        assert!(h.ct_eq_bytes(b"aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_-AB"));
        assert!(!h.ct_eq_bytes(b"aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_-AC"));
        assert!(!h.ct_eq_bytes(b"short"));
        assert!(h.occurs_in(b"xx aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_-AB yy"));
        assert!(!h.occurs_in(b"aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789_-A"));
    }
}
