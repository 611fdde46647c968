//! HTTP basic authentication against bcrypt hashes, as exporter-toolkit does it.
//!
//! bcrypt is slow on purpose (tens of milliseconds at cost 10), so a verified
//! (user, password, hash) is remembered as a keyed 64-bit digest and a Prometheus scraping
//! every few seconds pays once. Verification runs off the async thread, at most two at a time,
//! so a flood of wrong passwords cannot stall scrapes of the page.

use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;

use axum::http::HeaderValue;
use base64::Engine as _;
use tokio::sync::Semaphore;

/// Compared against when the user is unknown, so an unknown user costs as much as a wrong
/// password and user names cannot be probed by timing. (bcrypt of "unknown-user", cost 10.)
const DUMMY_HASH: &str = "$2b$10$COZhelpAZf4e2hSqfFtF3epDSlSBt94AV5g1Fro8oou/UN4OhWhwu";

/// Remembered successes beyond this are forgotten all at once (a user rotating passwords
/// cannot grow memory without bound).
const CACHE_LIMIT: usize = 1024;

/// Checks `Authorization: Basic` headers.
pub struct BasicAuth {
    /// Digests of (user, password, hash) that verified.
    verified: Mutex<HashSet<u64>>,
    /// Secret key of the digests, random per process.
    keys: RandomState,
    /// Bounds concurrent bcrypt work.
    bcrypt_slots: Semaphore,
}

impl Default for BasicAuth {
    fn default() -> Self {
        BasicAuth {
            verified: Mutex::new(HashSet::new()),
            keys: RandomState::new(),
            bcrypt_slots: Semaphore::new(2),
        }
    }
}

impl BasicAuth {
    /// Whether `header` carries a user of `users` with the right password.
    pub async fn allows(
        &self,
        users: &BTreeMap<String, String>,
        header: Option<&HeaderValue>,
    ) -> bool {
        let Some((user, password)) = header.and_then(credentials) else {
            return false;
        };
        let (known, hash) = match users.get(&user) {
            Some(hash) => (true, hash.clone()),
            None => (false, DUMMY_HASH.to_string()),
        };
        let digest = self.keys.hash_one((&user, &password, &hash));
        if known && self.lock().contains(&digest) {
            return true;
        }
        let Ok(_slot) = self.bcrypt_slots.acquire().await else {
            return false;
        };
        let verified = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash))
            .await
            .is_ok_and(|result| result.unwrap_or(false));
        if verified && known {
            let mut cache = self.lock();
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(digest);
        }
        verified && known
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        self.verified.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// User and password of a `Basic` authorization header.
pub fn credentials(header: &HeaderValue) -> Option<(String, String)> {
    let text = header.to_str().ok()?;
    let (scheme, encoded) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_decoded() {
        let header = |text: &str| HeaderValue::from_str(text).unwrap();
        assert_eq!(
            credentials(&header("Basic YWxpY2U6czNjcjN0OmV4dHJh")),
            Some(("alice".into(), "s3cr3t:extra".into()))
        );
        assert_eq!(
            credentials(&header("basic Ym9iOg==")),
            Some(("bob".into(), String::new()))
        );
        assert_eq!(credentials(&header("Bearer YWxpY2U6eA==")), None);
        assert_eq!(credentials(&header("Basic !!!")), None);
        assert_eq!(credentials(&header("Basic bm9jb2xvbg==")), None);
    }

    #[test]
    fn dummy_hash_is_a_cost_10_hash() {
        let parts: bcrypt::HashParts = DUMMY_HASH.parse().unwrap();
        assert_eq!(parts.get_cost(), 10);
        assert!(bcrypt::verify("unknown-user", DUMMY_HASH).unwrap());
    }

    #[tokio::test]
    async fn right_password_only_and_cached() {
        let hash = bcrypt::hash("s3cr3t", 4).unwrap();
        let users = BTreeMap::from([("alice".to_string(), hash)]);
        let auth = BasicAuth::default();
        let basic = |user: &str, password: &str| {
            let encoded =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            HeaderValue::from_str(&format!("Basic {encoded}")).unwrap()
        };
        assert!(!auth.allows(&users, None).await);
        assert!(!auth.allows(&users, Some(&basic("alice", "wrong"))).await);
        assert!(!auth.allows(&users, Some(&basic("mallory", "s3cr3t"))).await);
        assert!(
            !auth
                .allows(&users, Some(&basic("mallory", "unknown-user")))
                .await
        );
        assert!(auth.allows(&users, Some(&basic("alice", "s3cr3t"))).await);
        assert_eq!(auth.lock().len(), 1);
        assert!(auth.allows(&users, Some(&basic("alice", "s3cr3t"))).await);
        // A changed hash (new password in a reloaded file) is not served from the cache.
        let users = BTreeMap::from([("alice".to_string(), bcrypt::hash("n3w", 4).unwrap())]);
        assert!(!auth.allows(&users, Some(&basic("alice", "s3cr3t"))).await);
    }
}
