//! Counters the HTTP layer keeps for self-metrics; appended to every scrape.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::snapshot::{HttpCounters, Rejection};

/// Live counters, shared by the connection tasks and the `/metrics` handler.
#[derive(Debug, Default)]
pub struct HttpStats {
    open_connections: AtomicU64,
    rejected: [AtomicU64; Rejection::ALL.len()],
    web_config_reload_failed: AtomicBool,
}

impl HttpStats {
    /// Counts one rejection.
    pub fn reject(&self, reason: Rejection) {
        self.rejected[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection as open until the returned guard is dropped.
    pub fn open_connection(&self) -> OpenConnection<'_> {
        self.open_connections.fetch_add(1, Ordering::Relaxed);
        OpenConnection(self)
    }

    /// Records whether the last (re)load of the web configuration file worked.
    pub fn set_web_config_ok(&self, ok: bool) {
        self.web_config_reload_failed.store(!ok, Ordering::Relaxed);
    }

    /// A consistent-enough copy for one scrape.
    pub fn counters(&self) -> HttpCounters {
        HttpCounters {
            open_connections: self.open_connections.load(Ordering::Relaxed),
            rejected: std::array::from_fn(|i| self.rejected[i].load(Ordering::Relaxed)),
            web_config_reload_failed: self.web_config_reload_failed.load(Ordering::Relaxed),
        }
    }
}

/// Keeps a connection counted as open while alive.
pub struct OpenConnection<'a>(&'a HttpStats);

impl Drop for OpenConnection<'_> {
    fn drop(&mut self) {
        self.0.open_connections.fetch_sub(1, Ordering::Relaxed);
    }
}
