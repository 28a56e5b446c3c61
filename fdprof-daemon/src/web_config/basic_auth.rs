//! `basic_auth_users`: a user and password checked against a bcrypt hash. A check costs tens of
//! milliseconds of CPU by design, so a pair that passed is remembered (by a digest of the
//! password, never the password) and checked again only when the config changes; a pair that
//! failed is not, and each check runs on a blocking thread, never on the server's.

use std::collections::HashMap;
use std::sync::Mutex;

/// Pairs remembered as passing, at most (a scraper or two, a few people).
const REMEMBERED: usize = 64;

pub(crate) struct BasicAuth {
    /// User and bcrypt hash.
    users: HashMap<String, String>,
    passed: Mutex<HashMap<(String, [u8; 32]), ()>>,
}

/// A hash an unknown user's password is checked against: it costs what a known user's does,
/// so the time of an answer does not say which users exist. Made once, at the usual cost.
fn dummy_hash() -> &'static str {
    static HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HASH.get_or_init(|| bcrypt::hash("", bcrypt::DEFAULT_COST).unwrap_or_default())
}

impl BasicAuth {
    pub(crate) fn new(users: &[(String, String)]) -> Self {
        Self {
            users: users.iter().cloned().collect(),
            passed: Mutex::default(),
        }
    }

    /// Whether any user is set: without one, Basic credentials are not a way in.
    pub(crate) fn is_set(&self) -> bool {
        !self.users.is_empty()
    }

    /// Whether `user` and `password` pass (blocking: call it on a blocking thread).
    pub(crate) fn check(&self, user: &str, password: &str) -> bool {
        let digest = digest(password);
        let key = (user.to_string(), digest);
        let mut passed = self.passed.lock().unwrap_or_else(|e| e.into_inner());
        if passed.contains_key(&key) {
            return true;
        }
        drop(passed);
        let (hash, known) = match self.users.get(user) {
            Some(hash) => (hash.as_str(), true),
            None => (dummy_hash(), false),
        };
        let ok = bcrypt::verify(password, hash).unwrap_or(false) && known;
        if ok {
            passed = self.passed.lock().unwrap_or_else(|e| e.into_inner());
            if passed.len() >= REMEMBERED {
                passed.clear();
            }
            passed.insert(key, ());
        }
        ok
    }
}

fn digest(password: &str) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, password.as_bytes());
    d.as_ref().try_into().expect("SHA-256 is 32 bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bcrypt_user_passes_with_its_password_alone() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let auth = BasicAuth::new(&[("alice".into(), hash)]);
        assert!(auth.check("alice", "s3cret"));
        assert!(auth.check("alice", "s3cret"), "remembered");
        assert!(!auth.check("alice", "s3cre"));
        assert!(!auth.check("bob", "s3cret"));
        assert!(
            bcrypt::verify("x", dummy_hash()).is_ok(),
            "the dummy is a hash"
        );
    }
}
