//! The daemon's durable state (SPEC §2.5, §6): an owner-only directory with the session
//! catalog (nonsecret records) and the wake journal, every file written crash-safely (temp
//! file, fsync, rename, fsync the directory). Endpoints and handles never reach it.

use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Why the state could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// I/O.
    #[error("state directory: {0}")]
    Io(#[from] std::io::Error),
    /// Not owner-only, a symlink, or not ours.
    #[error("state directory {0} must be a real directory owned by us with no group/other bits")]
    Insecure(PathBuf),
    /// A record that does not parse.
    #[error("state record {0} is corrupt")]
    Corrupt(PathBuf),
}

/// A session's catalog record: everything durable about it, nothing secret.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionRecord {
    /// Session id.
    pub session_id: String,
    /// Current generation.
    pub generation: u64,
    /// The envelope version of its successful open (`2.0`, `1.0`, …).
    pub open_version: String,
    /// The session cwd (the adapter's implicit root).
    pub cwd: String,
    /// `session.mode` of the open (`memory` sessions are never persisted).
    pub mode: String,
    /// The retained nonsecret tool policy summary, or null for `tools:"none"`.
    pub policy: Option<Value>,
    /// `active`, `dormant` or `closed`.
    pub state: String,
    /// The recovery condition after a restart (SPEC §6), if any.
    pub recovery: Option<Value>,
}

/// A wake's journal record (SPEC §2.5).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WakeRecord {
    /// Session id.
    pub session_id: String,
    /// Generation.
    pub generation: u64,
    /// The wake's idempotency key.
    pub idempotency_key: String,
    /// SHA-256 of the canonical payload (hex).
    pub fingerprint: String,
    /// `queued`, `accepted`, `completed`, `failed`, `indeterminate` or `reconciled`.
    pub state: String,
    /// The turn result (completed).
    pub result: Option<Value>,
    /// The error body (failed).
    pub error: Option<Value>,
}

/// The store.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

fn key_name(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())
}

impl Store {
    /// Open (creating, mode 0700) the state directory; refuse one that is not owner-only.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        match std::fs::symlink_metadata(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir)?;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
            }
            Err(e) => return Err(e.into()),
            Ok(_) => {}
        }
        let m = std::fs::symlink_metadata(dir)?;
        let uid = rustix::process::geteuid().as_raw();
        if !m.file_type().is_dir() || m.uid() != uid || m.permissions().mode() & 0o077 != 0 {
            return Err(StoreError::Insecure(dir.to_path_buf()));
        }
        for sub in ["sessions", "wakes"] {
            let p = dir.join(sub);
            if !p.exists() {
                std::fs::create_dir(&p)?;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700))?;
            }
        }
        Ok(Store { dir: dir.to_path_buf() })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn write(&self, sub: &str, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let dir = self.dir.join(sub);
        let mut rnd = [0u8; 8];
        let _ = getrandom::fill(&mut rnd);
        let tmp = dir.join(format!(".{name}.{}.tmp", hex::encode(rnd)));
        let res = (|| -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, dir.join(name))?;
            std::fs::File::open(&dir)?.sync_all()
        })();
        if res.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        res.map_err(Into::into)
    }

    fn read_all<T: for<'de> Deserialize<'de>>(&self, sub: &str) -> Result<Vec<T>, StoreError> {
        let mut out = Vec::new();
        let mut names: Vec<PathBuf> = std::fs::read_dir(self.dir.join(sub))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        names.sort();
        for p in names {
            let text = std::fs::read(&p)?;
            out.push(serde_json::from_slice(&text).map_err(|_| StoreError::Corrupt(p.clone()))?);
        }
        Ok(out)
    }

    /// Write a session's record (replacing the previous one).
    pub fn put_session(&self, r: &SessionRecord) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec_pretty(r).unwrap_or_default();
        self.write("sessions", &format!("{}.json", key_name(&[&r.session_id])), &bytes)
    }

    /// Remove a session's record.
    pub fn remove_session(&self, session_id: &str) -> Result<(), StoreError> {
        let p = self.dir.join("sessions").join(format!("{}.json", key_name(&[session_id])));
        match std::fs::remove_file(p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => {
                std::fs::File::open(self.dir.join("sessions"))?.sync_all()?;
                Ok(())
            }
        }
    }

    /// Every session record.
    pub fn sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.read_all("sessions")
    }

    /// Write a wake record (replacing the previous state of the same key).
    pub fn put_wake(&self, w: &WakeRecord) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec_pretty(w).unwrap_or_default();
        let name = key_name(&[&w.session_id, &w.generation.to_string(), &w.idempotency_key]);
        self.write("wakes", &format!("{name}.json"), &bytes)
    }

    /// The wake record of a key, if any.
    pub fn wake(&self, session_id: &str, generation: u64, key: &str) -> Result<Option<WakeRecord>, StoreError> {
        let p = self.dir.join("wakes").join(format!("{}.json", key_name(&[session_id, &generation.to_string(), key])));
        match std::fs::read(&p) {
            Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|_| StoreError::Corrupt(p)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Every wake record.
    pub fn wakes(&self) -> Result<Vec<WakeRecord>, StoreError> {
        self.read_all("wakes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_replace() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(&d.path().join("state")).unwrap();
        let mut r = SessionRecord {
            session_id: "a".into(),
            generation: 1,
            open_version: "2.0".into(),
            cwd: "/w".into(),
            mode: "new".into(),
            policy: None,
            state: "active".into(),
            recovery: None,
        };
        s.put_session(&r).unwrap();
        r.generation = 2;
        s.put_session(&r).unwrap();
        assert_eq!(s.sessions().unwrap(), vec![r]);
        let w = WakeRecord {
            session_id: "a".into(),
            generation: 2,
            idempotency_key: "k".into(),
            fingerprint: "f".into(),
            state: "queued".into(),
            result: None,
            error: None,
        };
        s.put_wake(&w).unwrap();
        assert_eq!(s.wake("a", 2, "k").unwrap(), Some(w));
        assert_eq!(s.wake("a", 2, "other").unwrap(), None);
        s.remove_session("a").unwrap();
        assert!(s.sessions().unwrap().is_empty());
    }

    #[test]
    fn refuses_an_open_directory() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("open");
        std::fs::create_dir(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(Store::open(&p), Err(StoreError::Insecure(_))));
    }
}
