//! The HTTP side: routes over the published exposition, and the hardened listener in front of
//! them (connection cap, timeouts, header limits, TLS and basic auth from the exporter-toolkit
//! web configuration file).

pub mod auth;
pub mod config_file;
pub mod listener;
pub mod reload;
pub mod routes;
pub mod stats;
