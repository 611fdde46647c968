//! Where `top` gets its diagnosis: a sampler of its own on this node (or the demo node), or a
//! running exporter's `/api/v1/diagnosis` over HTTP or HTTPS, with basic auth and a client
//! certificate where the exporter asks for them.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::config::Config;
use crate::report;
use crate::sampler::Sampler;

/// How long a view waits for an exporter's first sample.
pub const FIRST_SAMPLE_WAIT: Duration = Duration::from_secs(15);

/// How often the view refreshes.
pub const REFRESH: Duration = Duration::from_secs(1);

/// A running exporter to read, and how to reach it.
#[derive(Debug, Clone, Default)]
pub struct Remote {
    /// `http://host:port` or `https://host:port` (a path, if any, is replaced).
    pub url: String,
    /// Basic-auth user.
    pub user: Option<String>,
    /// File holding the basic-auth password (first line).
    pub password_file: Option<PathBuf>,
    /// PEM file of the CA that signed the exporter's certificate (HTTPS).
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate and key, where the exporter requires one.
    pub cert_file: Option<PathBuf>,
    /// The client certificate's key.
    pub key_file: Option<PathBuf>,
}

/// Where the diagnosis comes from.
pub enum Source {
    /// Samples this node (or the demo node) itself.
    Local {
        /// The sampler and its analysis.
        sampler: Box<Sampler>,
        /// When sampling began.
        started: Instant,
    },
    /// Reads a running exporter.
    Remote(Remote),
}

impl Source {
    /// A sampler of its own on `config` (or on the demo node).
    pub fn local(config: &Config, demo: Option<crate::source::demo::DemoSource>) -> Source {
        let sampler = match demo {
            Some(demo) => Sampler::demo(config, demo),
            None => Sampler::from_config(config),
        };
        Source::Local {
            sampler: Box::new(sampler),
            started: Instant::now(),
        }
    }

    /// The diagnosis now: the sampler's next tick, or the exporter's latest.
    pub fn fetch(&mut self) -> Result<Value, String> {
        match self {
            Source::Local { sampler, started } => {
                let snapshot = sampler.tick(started.elapsed());
                Ok(report::diagnosis_json(
                    &snapshot.verdicts,
                    snapshot.simulated,
                ))
            }
            Source::Remote(remote) => remote.fetch(),
        }
    }

    /// The diagnosis once the exporter has one: an exporter started a moment ago answers 503
    /// until its first sample (a slow first tick on a loaded node), so a 503 is retried for
    /// up to [`FIRST_SAMPLE_WAIT`]; any other failure, or a 503 past that, is the answer.
    pub fn fetch_first(&mut self) -> Result<Value, String> {
        let deadline = Instant::now() + FIRST_SAMPLE_WAIT;
        loop {
            match self.fetch() {
                Err(e) if e.contains(" 503 ") && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(250));
                }
                answer => return answer,
            }
        }
    }

    /// What the header says the view shows.
    pub fn describe(&self) -> String {
        match self {
            Source::Local { .. } => "sampling this node".into(),
            Source::Remote(remote) => remote.url.clone(),
        }
    }
}

impl Remote {
    /// GETs `/api/v1/diagnosis` once.
    pub fn fetch(&self) -> Result<Value, String> {
        let (tls, rest) = match self.url.split_once("://") {
            Some(("http", rest)) => (false, rest),
            Some(("https", rest)) => (true, rest),
            _ => {
                return Err(format!(
                    "{}: expected http://host:port or https://host:port",
                    self.url
                ))
            }
        };
        let authority = rest.split('/').next().unwrap_or_default();
        let host = authority
            .rsplit_once(':')
            .map_or(authority, |(h, _)| h)
            .trim_matches(['[', ']']);
        let address = if authority.contains(':') {
            authority.to_string()
        } else {
            format!("{authority}:{}", if tls { 443 } else { 80 })
        };
        let mut request = format!(
            "GET /api/v1/diagnosis HTTP/1.1\r\nHost: {authority}\r\nAccept: application/json\r\nConnection: close\r\n"
        );
        if let Some(user) = &self.user {
            let password = match &self.password_file {
                Some(path) => std::fs::read_to_string(path)
                    .map_err(|e| format!("{}: {e}", path.display()))?
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_string(),
                None => String::new(),
            };
            use base64::Engine;
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            request += &format!("Authorization: Basic {token}\r\n");
        }
        request += "\r\n";
        let mut stream = TcpStream::connect(&address).map_err(|e| format!("{address}: {e}"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        let mut response = Vec::new();
        if tls {
            let config = self.tls_config()?;
            let name = rustls::pki_types::ServerName::try_from(host.to_string())
                .map_err(|e| format!("{host}: {e}"))?;
            let connection =
                rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
            let mut tls_stream = rustls::StreamOwned::new(connection, stream);
            tls_stream
                .write_all(request.as_bytes())
                .map_err(|e| format!("{address}: {e}"))?;
            read_all(&mut tls_stream, &mut response)?;
        } else {
            stream
                .write_all(request.as_bytes())
                .map_err(|e| format!("{address}: {e}"))?;
            read_all(&mut stream, &mut response)?;
        }
        let body = body_of(&response)?;
        serde_json::from_slice(&body).map_err(|e| format!("{}: not a diagnosis: {e}", self.url))
    }

    fn tls_config(&self) -> Result<rustls::ClientConfig, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let read =
            |path: &PathBuf| std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()));
        let mut roots = rustls::RootCertStore::empty();
        let ca = self
            .ca_file
            .as_ref()
            .ok_or("https needs --tls.ca-file: the CA that signed the exporter's certificate")?;
        for cert in CertificateDer::pem_slice_iter(&read(ca)?) {
            let cert = cert.map_err(|e| format!("{}: {e}", ca.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("{}: {e}", ca.display()))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                let chain = CertificateDer::pem_slice_iter(&read(cert)?)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("{}: {e}", cert.display()))?;
                let key = PrivateKeyDer::from_pem_slice(&read(key)?)
                    .map_err(|e| format!("{}: {e}", key.display()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| e.to_string())
            }
            (None, None) => Ok(builder.with_no_client_auth()),
            _ => Err("--tls.cert-file and --tls.key-file go together".into()),
        }
    }
}

fn read_all(stream: &mut impl Read, into: &mut Vec<u8>) -> Result<(), String> {
    match stream.read_to_end(into) {
        Ok(_) => Ok(()),
        // A TLS peer that closes without close_notify after a complete response.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !into.is_empty() => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// The body of an HTTP/1.1 response: its status must be 200; chunked or not.
fn body_of(response: &[u8]) -> Result<Vec<u8>, String> {
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no HTTP response")?;
    let head = String::from_utf8_lossy(&response[..split]);
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("the exporter answered {status}"));
    }
    let body = &response[split + 4..];
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if !chunked {
        return Ok(body.to_vec());
    }
    let (mut out, mut rest) = (Vec::new(), body);
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated chunk")?;
        let size = usize::from_str_radix(String::from_utf8_lossy(&rest[..line_end]).trim(), 16)
            .map_err(|_| "bad chunk size")?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(rest.get(..size).ok_or("truncated chunk")?);
        rest = rest.get(size + 2..).unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_waits_for_the_first_sample_of_an_exporter_just_started() {
        // Answers "no sample taken yet" twice, then a diagnosis.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            for answer in [503, 503, 200] {
                let (mut stream, _) = listener.accept().unwrap();
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request).unwrap();
                let reply = if answer == 503 {
                    "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 20\r\nConnection: close\r\n\r\nno sample taken yet\n".to_string()
                } else {
                    "HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\n{\"gpus\": []}".to_string()
                };
                stream.write_all(reply.as_bytes()).unwrap();
            }
        });
        let mut source = Source::Remote(Remote {
            url,
            user: None,
            password_file: None,
            ca_file: None,
            cert_file: None,
            key_file: None,
        });
        let diagnosis = source.fetch_first().unwrap();
        assert_eq!(diagnosis["gpus"], serde_json::json!([]));
        server.join().unwrap();
    }

    #[test]
    fn bodies_plain_and_chunked_and_errors() {
        assert_eq!(
            body_of(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}").unwrap(),
            b"{}"
        );
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{\"\r\n3\r\na\":\r\n1\r\n1\r\n0\r\n\r\n";
        assert_eq!(body_of(chunked).unwrap(), b"{\"a\":1");
        assert!(body_of(b"HTTP/1.1 401 Unauthorized\r\n\r\n")
            .unwrap_err()
            .contains("401"));
    }
}
