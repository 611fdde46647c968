//! The web configuration file in the Prometheus exporter-toolkit format (`--web.config.file`):
//! TLS, client certificates, basic auth and extra response headers, so one file works for
//! this exporter and node_exporter alike.
//!
//! Parsing is pure and reports file, line and column like the main configuration; building
//! reads the files it names. [`super::reload::WebConfig`] re-reads everything when a file
//! changes, keeping the last good settings while the new ones are broken.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::http::{HeaderName, HeaderValue};
use rustls::crypto::ring as provider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use tokio_rustls::TlsAcceptor;

/// The file as written. Unknown keys are refused.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebConfigFile {
    /// Serve HTTPS with this certificate; plain HTTP without it.
    pub tls_server_config: Option<TlsServerConfig>,
    /// HTTP settings.
    pub http_server_config: HttpServerConfig,
    /// User name → bcrypt hash of the password; empty: no authentication.
    pub basic_auth_users: BTreeMap<String, BcryptHash>,
}

/// `tls_server_config`. Relative paths are relative to the web configuration file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsServerConfig {
    /// PEM certificate chain file (or `cert`, the PEM inline).
    pub cert_file: Option<PathBuf>,
    /// PEM private key file (or `key`, the PEM inline).
    pub key_file: Option<PathBuf>,
    /// Inline PEM certificate chain.
    pub cert: Option<String>,
    /// Inline PEM private key.
    pub key: Option<String>,
    /// Whether clients must present a certificate signed by `client_ca_file`.
    pub client_auth_type: ClientAuthType,
    /// PEM bundle of the CAs client certificates must chain to.
    pub client_ca_file: Option<PathBuf>,
    /// Inline PEM bundle of client CAs.
    pub client_ca: Option<String>,
    /// Lowest TLS version accepted: TLS12 (default) or TLS13.
    pub min_version: TlsVersion,
    /// Highest TLS version accepted: TLS12 or TLS13 (default).
    pub max_version: Option<TlsVersion>,
    /// TLS 1.2 cipher suites allowed, by Go name (TLS 1.3 suites are not configurable, as in
    /// Go); empty: all the suites rustls offers.
    pub cipher_suites: Vec<CipherSuiteName>,
    /// Pick the cipher suite by the server's order instead of the client's.
    pub prefer_server_cipher_suites: bool,
    /// Key-exchange groups in preference order: X25519, CurveP256, CurveP384.
    pub curve_preferences: Vec<Curve>,
    /// Not supported: refused with an explanation rather than silently ignored.
    pub client_allowed_sans: Option<Unsupported>,
}

/// `http_server_config`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpServerConfig {
    /// Accepted for compatibility; this server speaks HTTP/1.1 only, which every Prometheus
    /// version uses for scrapes.
    pub http2: Option<bool>,
    /// Security headers added to every response (the exporter-toolkit's allowed set).
    pub headers: BTreeMap<SecurityHeader, String>,
}

/// exporter-toolkit's `client_auth_type`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ClientAuthType {
    /// No client certificate asked for.
    #[default]
    NoClientCert,
    /// A certificate is optional but, when given, must verify against the client CAs.
    VerifyClientCertIfGiven,
    /// A certificate verifying against the client CAs is required.
    RequireAndVerifyClientCert,
}

impl<'de> Deserialize<'de> for ClientAuthType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "NoClientCert" => Ok(ClientAuthType::NoClientCert),
            "VerifyClientCertIfGiven" => Ok(ClientAuthType::VerifyClientCertIfGiven),
            "RequireAndVerifyClientCert" => Ok(ClientAuthType::RequireAndVerifyClientCert),
            other @ ("RequestClientCert" | "RequireAnyClientCert") => Err(D::Error::custom(format!(
                "client_auth_type {other} accepts certificates nobody verified and is not supported; use VerifyClientCertIfGiven or RequireAndVerifyClientCert"
            ))),
            other => Err(D::Error::custom(format!(
                "unknown client_auth_type {other:?}: expected NoClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert"
            ))),
        }
    }
}

/// A TLS protocol version rustls speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// TLS 1.2.
    #[default]
    Tls12,
    /// TLS 1.3.
    Tls13,
}

impl<'de> Deserialize<'de> for TlsVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "TLS12" => Ok(TlsVersion::Tls12),
            "TLS13" => Ok(TlsVersion::Tls13),
            other @ ("TLS10" | "TLS11") => Err(D::Error::custom(format!(
                "{other} is obsolete and not offered; expected TLS12 or TLS13"
            ))),
            other => Err(D::Error::custom(format!(
                "unknown TLS version {other:?}: expected TLS12 or TLS13"
            ))),
        }
    }
}

/// A TLS 1.2 cipher suite rustls implements, named as Go names it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CipherSuiteName(pub SupportedCipherSuite);

impl<'de> Deserialize<'de> for CipherSuiteName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        // Go calls the ChaCha suites both with and without the _SHA256 suffix.
        let canonical = match name.strip_suffix("_CHACHA20_POLY1305") {
            Some(prefix) => format!("{prefix}_CHACHA20_POLY1305_SHA256"),
            None => name.clone(),
        };
        let tls12 = || {
            provider::ALL_CIPHER_SUITES
                .iter()
                .filter(|s| s.version() == &rustls::version::TLS12)
        };
        tls12()
            .find(|s| format!("{:?}", s.suite()) == canonical)
            .map(|s| CipherSuiteName(*s))
            .ok_or_else(|| {
                let known: Vec<String> = tls12().map(|s| format!("{:?}", s.suite())).collect();
                D::Error::custom(format!(
                    "unsupported cipher suite {name:?}: expected one of {}",
                    known.join(", ")
                ))
            })
    }
}

/// A key-exchange group, named as Go names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    /// X25519.
    X25519,
    /// NIST P-256.
    P256,
    /// NIST P-384.
    P384,
}

impl<'de> Deserialize<'de> for Curve {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "X25519" => Ok(Curve::X25519),
            "CurveP256" => Ok(Curve::P256),
            "CurveP384" => Ok(Curve::P384),
            other => Err(D::Error::custom(format!(
                "unsupported curve {other:?}: expected X25519, CurveP256 or CurveP384"
            ))),
        }
    }
}

/// One of the response headers exporter-toolkit lets a web config set, lower-cased.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SecurityHeader(pub String);

const SECURITY_HEADERS: [&str; 5] = [
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
];

impl<'de> Deserialize<'de> for SecurityHeader {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        if SECURITY_HEADERS
            .iter()
            .any(|known| known.eq_ignore_ascii_case(&name))
        {
            Ok(SecurityHeader(name.to_ascii_lowercase()))
        } else {
            Err(D::Error::custom(format!(
                "header {name:?} cannot be set: expected one of {}",
                SECURITY_HEADERS.join(", ")
            )))
        }
    }
}

/// A bcrypt hash (`$2a$`, `$2b$` or `$2y$`, 60 characters), checked while parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BcryptHash(pub String);

impl<'de> Deserialize<'de> for BcryptHash {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let hash = String::deserialize(d)?;
        if hash.parse::<bcrypt::HashParts>().is_ok() {
            Ok(BcryptHash(hash))
        } else {
            Err(D::Error::custom(
                "not a bcrypt hash: expected $2b$10$... as printed by `gpu-bottleneck-exporter hash-password` (or htpasswd -nBC 10)",
            ))
        }
    }
}

/// A key this exporter knows but does not implement; refusing it beats ignoring a security
/// setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported;

impl<'de> Deserialize<'de> for Unsupported {
    fn deserialize<D: Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(D::Error::custom(
            "client_allowed_sans is not supported; issue client certificates from a dedicated CA and name it in client_ca_file",
        ))
    }
}

impl WebConfigFile {
    /// Parses the YAML text; `origin` names the file in errors.
    pub fn parse(text: &str, origin: &str) -> Result<WebConfigFile, String> {
        serde_saphyr::from_str::<WebConfigFile>(text)
            .map_err(|e| format!("invalid web configuration in {origin}: {e}"))
    }

    /// The files the settings depend on, relative paths resolved against `dir`.
    pub(super) fn files(&self, dir: &Path) -> Vec<PathBuf> {
        let Some(tls) = &self.tls_server_config else {
            return Vec::new();
        };
        [&tls.cert_file, &tls.key_file, &tls.client_ca_file]
            .into_iter()
            .flatten()
            .map(|file| dir.join(file))
            .collect()
    }
}

/// What the server applies, built from a [`WebConfigFile`].
pub struct WebSettings {
    /// Present when serving HTTPS.
    pub tls: Option<TlsAcceptor>,
    /// User name → bcrypt hash; empty: no authentication.
    pub users: BTreeMap<String, String>,
    /// Headers added to every response.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl WebSettings {
    /// Plain HTTP, no authentication: what runs without `--web.config.file`.
    pub fn plain() -> WebSettings {
        WebSettings {
            tls: None,
            users: BTreeMap::new(),
            headers: Vec::new(),
        }
    }

    /// Reads the certificate files and builds the TLS configuration.
    pub fn build(file: &WebConfigFile, dir: &Path) -> Result<WebSettings, String> {
        let tls = match &file.tls_server_config {
            Some(tls) => Some(TlsAcceptor::from(Arc::new(server_config(tls, dir)?))),
            None => None,
        };
        let headers = file
            .http_server_config
            .headers
            .iter()
            .map(|(name, value)| {
                let name = HeaderName::from_bytes(name.0.as_bytes()).expect("a known header name");
                HeaderValue::from_str(value)
                    .map(|value| (name.clone(), value))
                    .map_err(|_| format!("header {name} has an invalid value {value:?}"))
            })
            .collect::<Result<_, _>>()?;
        let users = file
            .basic_auth_users
            .iter()
            .map(|(user, hash)| (user.clone(), hash.0.clone()))
            .collect();
        Ok(WebSettings {
            tls,
            users,
            headers,
        })
    }
}

/// Reads PEM from `file` (resolved against `dir`) or the inline text; `what` names it in errors.
fn pem(
    file: &Option<PathBuf>,
    inline: &Option<String>,
    dir: &Path,
    what: &str,
) -> Result<Option<(Vec<u8>, String)>, String> {
    match (file, inline) {
        (Some(_), Some(_)) => Err(format!("give either {what}_file or {what}, not both")),
        (Some(file), None) => {
            let path = dir.join(file);
            std::fs::read(&path)
                .map(|bytes| Some((bytes, path.display().to_string())))
                .map_err(|e| format!("cannot read {what}_file {}: {e}", path.display()))
        }
        (None, Some(text)) => Ok(Some((text.clone().into_bytes(), format!("inline {what}")))),
        (None, None) => Ok(None),
    }
}

fn certificates(pem: &[u8], origin: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{origin}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{origin}: no PEM certificate found"));
    }
    Ok(certs)
}

fn server_config(tls: &TlsServerConfig, dir: &Path) -> Result<ServerConfig, String> {
    let (cert_pem, cert_origin) = pem(&tls.cert_file, &tls.cert, dir, "cert")?
        .ok_or("tls_server_config needs cert_file (or cert)")?;
    let (key_pem, key_origin) = pem(&tls.key_file, &tls.key, dir, "key")?
        .ok_or("tls_server_config needs key_file (or key)")?;
    let chain = certificates(&cert_pem, &cert_origin)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| format!("{key_origin}: no usable PEM private key ({e})"))?;

    let mut crypto = provider::default_provider();
    if !tls.cipher_suites.is_empty() {
        crypto.cipher_suites.retain(|suite| {
            suite.version() == &rustls::version::TLS13
                || tls.cipher_suites.iter().any(|wanted| wanted.0 == *suite)
        });
    }
    if !tls.curve_preferences.is_empty() {
        crypto.kx_groups = tls
            .curve_preferences
            .iter()
            .map(|curve| match curve {
                Curve::X25519 => provider::kx_group::X25519,
                Curve::P256 => provider::kx_group::SECP256R1,
                Curve::P384 => provider::kx_group::SECP384R1,
            })
            .collect();
    }
    let max = tls.max_version.unwrap_or(TlsVersion::Tls13);
    if max < tls.min_version {
        return Err("tls_server_config: max_version is below min_version".into());
    }
    let versions: Vec<_> = [
        (TlsVersion::Tls12, &rustls::version::TLS12),
        (TlsVersion::Tls13, &rustls::version::TLS13),
    ]
    .into_iter()
    .filter(|(v, _)| (tls.min_version..=max).contains(v))
    .map(|(_, v)| v)
    .collect();

    let builder = ServerConfig::builder_with_provider(Arc::new(crypto))
        .with_protocol_versions(&versions)
        .map_err(|e| format!("tls_server_config: {e}"))?;
    let client_ca = pem(&tls.client_ca_file, &tls.client_ca, dir, "client_ca")?;
    let builder = match (tls.client_auth_type, client_ca) {
        (ClientAuthType::NoClientCert, _) => builder.with_no_client_auth(),
        (_, None) => {
            return Err(format!(
                "client_auth_type {:?} needs client_ca_file (or client_ca)",
                tls.client_auth_type
            ))
        }
        (auth, Some((ca_pem, ca_origin))) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(&ca_pem, &ca_origin)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("{ca_origin}: unusable CA certificate: {e}"))?;
            }
            let verifier = WebPkiClientVerifier::builder(Arc::new(roots));
            let verifier = if auth == ClientAuthType::VerifyClientCertIfGiven {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(
                verifier.build().map_err(|e| format!("{ca_origin}: {e}"))?,
            )
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("{cert_origin} with {key_origin}: {e}"))?;
    config.ignore_client_order = tls.prefer_server_cipher_suites;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(yaml: &str) -> String {
        WebConfigFile::parse(yaml, "web.yml").unwrap_err()
    }

    #[test]
    fn exporter_toolkit_example_parses() {
        let file = WebConfigFile::parse(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  min_version: TLS13\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305]\n  prefer_server_cipher_suites: true\n  curve_preferences: [X25519, CurveP256]\nhttp_server_config:\n  http2: true\n  headers:\n    X-Frame-Options: deny\nbasic_auth_users:\n  prometheus: $2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG\n",
            "web.yml",
        )
        .unwrap();
        let tls = file.tls_server_config.unwrap();
        assert_eq!(
            tls.client_auth_type,
            ClientAuthType::RequireAndVerifyClientCert
        );
        assert_eq!(tls.min_version, TlsVersion::Tls13);
        assert_eq!(tls.curve_preferences, vec![Curve::X25519, Curve::P256]);
        assert_eq!(tls.cipher_suites.len(), 1);
        assert_eq!(file.basic_auth_users.len(), 1);
    }

    #[test]
    fn mistakes_are_refused_at_their_position() {
        for (yaml, position, words) in [
            (
                "tls_server_config:\n  cert_fil: a\n",
                "line 2 column 3",
                "unknown field",
            ),
            (
                "tls_server_config:\n  min_version: TLS11\n",
                "line 2 column 16",
                "obsolete",
            ),
            (
                "tls_server_config:\n  client_auth_type: RequestClientCert\n",
                "line 2 column 21",
                "not supported",
            ),
            (
                "tls_server_config:\n  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n",
                "line 2 column 19",
                "unsupported cipher suite",
            ),
            (
                "tls_server_config:\n  curve_preferences: [CurveP521]\n",
                "line 2 column 23",
                "unsupported curve",
            ),
            (
                "tls_server_config:\n  client_allowed_sans: [a]\n",
                "line 2 column 24",
                "not supported",
            ),
            (
                "http_server_config:\n  headers:\n    Server: x\n",
                "line 3 column 5",
                "cannot be set",
            ),
            (
                "basic_auth_users:\n  alice: secret\n",
                "line 2 column 10",
                "not a bcrypt hash",
            ),
        ] {
            let message = error_of(yaml);
            assert!(message.contains("web.yml"), "{message}");
            assert!(message.contains(position), "{yaml}: {message}");
            assert!(message.contains(words), "{yaml}: {message}");
        }
    }
}
