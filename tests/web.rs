//! The HTTP layer of the real binary: limits and timeouts against slow and hostile clients,
//! TLS with client certificates and reloads, and basic auth — through real sockets and a real
//! TLS client (rustls; scripts/test.sh repeats the TLS and auth checks with Python's OpenSSL).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::exposition::{self, value};
use common::{binary, http, repo_root, Exporter, TempDir};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

fn rejected(page: &[exposition::Family], reason: &str) -> f64 {
    value(
        page,
        "gpu_exporter_http_rejected_total",
        &[("reason", reason)],
    )
    .unwrap()
}

/// Starts the exporter (demo node: it needs no host files) with `config` as its file.
fn start(dir: &TempDir, config: &str) -> Exporter {
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, config).unwrap();
    Exporter::start(&["--demo", "--config", file.to_str().unwrap()])
}

#[test]
fn methods_and_oversized_heads_are_refused() {
    let dir = TempDir::new("web-methods");
    let exporter = start(&dir, "web:\n  max_header_bytes: 4096\n");
    exporter.metrics_when(|_| true);
    for method in ["POST", "PUT", "DELETE", "OPTIONS", "TRACE"] {
        let response = http::request(exporter.address, method, "/metrics", &[]).unwrap();
        assert_eq!(response.status, 405, "{method}");
        assert_eq!(response.header("allow"), Some("GET,HEAD"), "{method}");
    }
    let huge = "x".repeat(8000);
    let response = exporter.get("/metrics", &[("X-Padding", &huge)]);
    assert_eq!(response.status, 431);
    let fits = "x".repeat(3000);
    assert_eq!(
        exporter.get("/metrics", &[("X-Padding", &fits)]).status,
        200
    );
    let page = exporter.metrics_when(|page| rejected(page, "bad_request") >= 1.0);
    assert_eq!(rejected(&page, "bad_request"), 1.0);
}

#[test]
fn connections_past_the_cap_get_503_until_one_closes() {
    let dir = TempDir::new("web-cap");
    let exporter = start(&dir, "web:\n  max_connections: 4\n");
    exporter.metrics_when(|_| true);
    let idle: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(exporter.address).unwrap())
        .collect();
    // The server counts a connection once it has accepted it.
    std::thread::sleep(Duration::from_millis(300));
    let refused = exporter.get("/metrics", &[]);
    assert_eq!(refused.status, 503);
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.text(), "too many connections\n");
    drop(idle);
    let page = exporter
        .metrics_when(|page| value(page, "gpu_exporter_http_open_connections", &[]) == Some(1.0));
    assert!(rejected(&page, "connection_limit") >= 1.0);
}

/// A flood past the cap: 200 clients at once against a cap of 4, more than the server refuses
/// at the same time. Every client must read a 503 (or, once connections free up, a page); a
/// reset or an unanswered close is counted apart and must not happen.
#[test]
fn a_flood_past_the_cap_gets_readable_503s_not_resets() {
    let dir = TempDir::new("web-flood");
    let exporter = start(&dir, "web:\n  max_connections: 4\n");
    exporter.metrics_when(|_| true);
    let idle: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(exporter.address).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let address = exporter.address;
    let clients: Vec<_> = (0..200)
        .map(|_| {
            std::thread::spawn(move || -> Result<String, std::io::Error> {
                let mut stream = TcpStream::connect(address)?;
                stream.set_read_timeout(Some(Duration::from_secs(20)))?;
                stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")?;
                let mut reply = Vec::new();
                std::io::Read::read_to_end(&mut stream, &mut reply)?;
                Ok(String::from_utf8_lossy(&reply).into_owned())
            })
        })
        .collect();
    let (mut refused, mut resets, mut unanswered, mut other) = (0, 0, 0, Vec::new());
    for client in clients {
        match client.join().unwrap() {
            Ok(reply) if reply.starts_with("HTTP/1.1 503") => {
                assert!(reply.ends_with("too many connections\n"), "{reply}");
                refused += 1;
            }
            Ok(reply) if reply.is_empty() => unanswered += 1,
            Ok(reply) => other.push(reply.lines().next().unwrap_or_default().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => resets += 1,
            Err(e) => other.push(e.to_string()),
        }
    }
    eprintln!("200 clients past a cap of 4: {refused} got 503, {resets} resets, {unanswered} closed unanswered, other: {other:?}");
    assert_eq!((resets, unanswered), (0, 0));
    assert_eq!(refused, 200, "{other:?}");
    drop(idle);
    let page = exporter
        .metrics_when(|page| value(page, "gpu_exporter_http_open_connections", &[]) == Some(1.0));
    assert!(rejected(&page, "connection_limit") >= 200.0);
}

#[test]
fn slow_clients_are_cut_off_while_scrapes_are_answered() {
    let dir = TempDir::new("web-slow");
    let exporter = start(&dir, "web:\n  header_read_timeout: 2s\n");
    exporter.metrics_when(|_| true);
    // 100 clients that send a request head one header every 300 ms and never finish it.
    let mut slow: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut stream = TcpStream::connect(exporter.address).unwrap();
            stream
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
            stream
        })
        .collect();
    let started = Instant::now();
    let mut latencies = Vec::new();
    while started.elapsed() < Duration::from_millis(1500) {
        for stream in &mut slow {
            let _ = stream.write_all(b"X-Slow: 1\r\n");
        }
        let before = Instant::now();
        // The client's 10 s read timeout turns a starved scrape into a failure.
        let response = exporter.get("/metrics", &[]);
        latencies.push(before.elapsed());
        assert_eq!(response.status, 200);
        std::thread::sleep(Duration::from_millis(300));
    }
    latencies.sort();
    eprintln!(
        "{} scrapes beside 100 slow clients: median {:?}, max {:?}",
        latencies.len(),
        latencies[latencies.len() / 2],
        latencies.last().unwrap()
    );
    // Past the header timeout every slow connection is closed by the server.
    let page = exporter.metrics_when(|page| rejected(page, "header_timeout") >= 100.0);
    assert_eq!(
        value(&page, "gpu_exporter_http_open_connections", &[]),
        Some(1.0)
    );
    for stream in &mut slow {
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut rest = Vec::new();
        // Closed: end of file (or a reset, as the server never read the last headers).
        let _ = stream.read_to_end(&mut rest);
        assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    }
}

#[test]
fn a_client_that_stops_reading_is_cut_off() {
    let dir = TempDir::new("web-stall");
    let exporter = start(&dir, "web:\n  write_timeout: 1s\n");
    exporter.metrics_when(|_| true);
    // Thousands of pipelined scrapes of the demo page (~200 KiB each), none read: the socket
    // buffers fill and the server's writes stall.
    let mut stalled = TcpStream::connect(exporter.address).unwrap();
    let pipeline = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(2000);
    stalled.write_all(pipeline.as_bytes()).unwrap();
    let page = exporter.metrics_when(|page| rejected(page, "write_timeout") >= 1.0);
    assert_eq!(
        value(&page, "gpu_exporter_http_open_connections", &[]),
        Some(1.0)
    );
}

#[test]
fn a_request_over_its_time_gets_503() {
    let dir = TempDir::new("web-timeout");
    // 1 ms cannot cover a bcrypt check at cost 10 (tens of milliseconds).
    let hash = bcrypt::hash("s3cr3t", 10).unwrap();
    std::fs::write(
        dir.path().join("web.yml"),
        format!("basic_auth_users:\n  alice: {hash}\n"),
    )
    .unwrap();
    let exporter = start(
        &dir,
        &format!(
            "web:\n  request_timeout: 1ms\n  config_file: {}\n",
            dir.path().join("web.yml").display()
        ),
    );
    let response = exporter.get("/metrics", &[("Authorization", "Basic YWxpY2U6czNjcjN0")]);
    assert_eq!(response.status, 503);
    assert_eq!(response.text(), "request timed out\n");
}

#[test]
fn basic_auth_admits_only_the_right_password() {
    let dir = TempDir::new("web-auth");
    let hash = bcrypt::hash("s3cr3t", 10).unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        format!("basic_auth_users:\n  alice: {hash}\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n"),
    )
    .unwrap();
    let exporter = Exporter::start(&["--demo", "--web.config.file", web.to_str().unwrap()]);
    let alice = ("Authorization", "Basic YWxpY2U6czNjcjN0"); // alice:s3cr3t
    let wrong = ("Authorization", "Basic YWxpY2U6d3Jvbmc="); // alice:wrong
    let mallory = ("Authorization", "Basic bWFsbG9yeTpzM2NyM3Q="); // mallory:s3cr3t

    let missing = exporter.get("/metrics", &[]);
    assert_eq!(missing.status, 401);
    assert_eq!(
        missing.header("www-authenticate"),
        Some("Basic realm=\"gpu-bottleneck-exporter\"")
    );
    assert_eq!(missing.header("x-frame-options"), Some("deny"));
    assert_eq!(exporter.get("/metrics", &[wrong]).status, 401);
    assert_eq!(exporter.get("/metrics", &[mallory]).status, 401);
    assert_eq!(exporter.get("/api/v1/diagnosis", &[]).status, 401);
    // Probes stay open: they reveal nothing and kubelets send no credentials.
    assert_eq!(exporter.get("/healthz", &[]).status, 200);
    assert_eq!(exporter.get("/readyz", &[]).status, 200);

    let mut page = Vec::new();
    exporter.wait_for(|| {
        let response = exporter.get("/metrics", &[alice]);
        assert_eq!(response.status, 200);
        page = exposition::parse(&response.text(), false).unwrap();
        value(&page, "gpu_verdict", &[]).is_some()
    });
    assert_eq!(rejected(&page, "unauthorized"), 4.0);

    // A new password in the file applies without a restart.
    let hash = bcrypt::hash("n3w", 10).unwrap();
    std::fs::write(&web, format!("basic_auth_users:\n  alice: {hash}\n")).unwrap();
    exporter.wait_for(|| exporter.get("/metrics", &[alice]).status == 401);
    let new = ("Authorization", "Basic YWxpY2U6bjN3"); // alice:n3w
    assert_eq!(exporter.get("/metrics", &[new]).status, 200);
}

/// A TLS client trusting the test CA, presenting `client` (name of a fixture pair) if given.
fn tls_client(client: Option<&str>) -> Arc<rustls::ClientConfig> {
    let fixtures = repo_root().join("tests/fixtures/tls");
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(fixtures.join("ca.crt")).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    Arc::new(match client {
        None => builder.with_no_client_auth(),
        Some(name) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_file(fixtures.join(format!("{name}.crt"))).unwrap()],
                PrivateKeyDer::from_pem_file(fixtures.join(format!("{name}.key"))).unwrap(),
            )
            .unwrap(),
    })
}

/// GET `path` over TLS; the response and the server's certificate.
fn tls_get(
    exporter: &Exporter,
    config: &Arc<rustls::ClientConfig>,
    path: &str,
) -> std::io::Result<(http::Response, Vec<u8>)> {
    let tcp = TcpStream::connect(exporter.address)?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    let name = ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(config.clone(), name).unwrap();
    let mut stream = rustls::StreamOwned::new(connection, tcp);
    let response = http::exchange(&mut stream, "GET", path, &[])?;
    let certificate = stream.conn.peer_certificates().unwrap()[0].to_vec();
    Ok((response, certificate))
}

fn certificate(name: &str) -> Vec<u8> {
    let path = repo_root().join(format!("tests/fixtures/tls/{name}.crt"));
    CertificateDer::from_pem_file(path).unwrap().to_vec()
}

fn copy_fixture(dir: &Path, from: &str, to: &str) {
    let fixtures = repo_root().join("tests/fixtures/tls");
    // Write then rename, as Kubernetes swaps mounted secrets, so no reader sees half a file.
    let temporary = dir.join(format!(".{to}.new"));
    std::fs::copy(fixtures.join(from), &temporary).unwrap();
    std::fs::rename(&temporary, dir.join(to)).unwrap();
}

#[test]
fn tls_with_client_certificates_reloads_certificates() {
    let dir = TempDir::new("web-tls");
    for name in ["server.crt", "server.key", "ca.crt"] {
        copy_fixture(dir.path(), name, name);
    }
    let web = dir.path().join("web.yml");
    // Relative paths are relative to the web configuration file.
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
    )
    .unwrap();
    let exporter = Exporter::spawn(&["--demo", "--web.config.file", web.to_str().unwrap()], &[]);
    let trusted = tls_client(Some("client"));
    exporter.wait_for(
        || matches!(tls_get(&exporter, &trusted, "/readyz"), Ok((r, _)) if r.status == 200),
    );

    let (response, served) = tls_get(&exporter, &trusted, "/metrics").unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(served, certificate("server"));
    exposition::parse(&response.text(), false).unwrap();

    // No certificate, or one from another CA: the handshake fails.
    assert!(tls_get(&exporter, &tls_client(None), "/metrics").is_err());
    assert!(tls_get(&exporter, &tls_client(Some("stranger")), "/metrics").is_err());
    // Plain HTTP is told it reached an HTTPS server, as Go's servers do.
    let plain = http::get(exporter.address, "/metrics", &[]).unwrap();
    assert_eq!(plain.status, 400);
    assert_eq!(
        plain.text(),
        "Client sent an HTTP request to an HTTPS server.\n"
    );
    let page = |exporter: &Exporter| {
        let (response, _) = tls_get(exporter, &trusted, "/metrics").unwrap();
        exposition::parse(&response.text(), false).unwrap()
    };
    assert_eq!(rejected(&page(&exporter), "tls_handshake"), 3.0);

    // A renewed certificate is served from the next connection on, without a restart.
    copy_fixture(dir.path(), "server2.key", "server.key");
    copy_fixture(dir.path(), "server2.crt", "server.crt");
    exporter
        .wait_for(|| tls_get(&exporter, &trusted, "/healthz").unwrap().1 == certificate("server2"));
    assert_eq!(
        value(
            &page(&exporter),
            "gpu_exporter_web_config_last_reload_successful",
            &[]
        ),
        Some(1.0)
    );

    // A broken key keeps the last good settings in force and says so.
    std::fs::write(dir.path().join("server.key"), "not a key\n").unwrap();
    exporter.wait_for(|| {
        value(
            &page(&exporter),
            "gpu_exporter_web_config_last_reload_successful",
            &[],
        ) == Some(0.0)
    });
    assert_eq!(
        tls_get(&exporter, &trusted, "/healthz").unwrap().1,
        certificate("server2")
    );
    copy_fixture(dir.path(), "server2.key", "server.key");
    exporter.wait_for(|| {
        value(
            &page(&exporter),
            "gpu_exporter_web_config_last_reload_successful",
            &[],
        ) == Some(1.0)
    });
}

#[test]
fn a_bad_web_config_refuses_the_start() {
    let dir = TempDir::new("web-bad");
    let run = |yaml: &str| {
        let web = dir.path().join("web.yml");
        std::fs::write(&web, yaml).unwrap();
        let output = Command::new(binary())
            .args([
                "serve",
                "--demo",
                "--listen",
                "127.0.0.1:0",
                "--web.config.file",
            ])
            .arg(&web)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{yaml}");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(stderr.contains(&web.display().to_string()), "{stderr}");
        stderr
    };
    let stderr = run("tls_server_config:\n  cert_file: a.crt\n  min_version: TLS10\n");
    assert!(stderr.contains("line 3 column 16"), "{stderr}");
    let stderr = run("basic_auth_users:\n  alice: hunter2\n");
    assert!(
        stderr.contains("line 2 column 10") && stderr.contains("bcrypt"),
        "{stderr}"
    );
    let stderr = run("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n");
    assert!(stderr.contains("missing.crt"), "{stderr}");
    let stderr = run(&format!(
        "tls_server_config:\n  cert_file: {0}/server.crt\n  key_file: {0}/server2.key\n",
        repo_root().join("tests/fixtures/tls").display()
    ));
    assert!(stderr.contains("server2.key"), "{stderr}");
}

#[test]
fn sigterm_lets_the_request_in_progress_finish() {
    let dir = TempDir::new("web-drain");
    // bcrypt at cost 14 keeps the request busy for a good second after it is sent.
    let hash = bcrypt::hash("s3cr3t", 14).unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  alice: {hash}\n")).unwrap();
    let mut exporter = Exporter::start(&["--demo", "--web.config.file", web.to_str().unwrap()]);
    let address = exporter.address;
    let scrape = std::thread::spawn(move || {
        http::get(
            address,
            "/metrics",
            &[("Authorization", "Basic YWxpY2U6czNjcjN0")],
        )
    });
    std::thread::sleep(Duration::from_millis(200));
    let pid = exporter.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let response = scrape
        .join()
        .unwrap()
        .expect("the request in progress is answered");
    assert_eq!(response.status, 200);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = exporter.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the exporter did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    assert!(TcpStream::connect(address).is_err(), "no longer listening");
}

#[test]
fn hash_password_prints_a_hash_the_server_accepts() {
    let mut child = Command::new(binary())
        .args(["hash-password", "--cost", "4"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"s3cr3t\n").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let hash = String::from_utf8(output.stdout).unwrap();
    assert!(bcrypt::verify("s3cr3t", hash.trim()).unwrap(), "{hash}");
    assert!(!bcrypt::verify("s3cr3t\n", hash.trim()).unwrap());
}

#[test]
fn min_version_and_cipher_suites_are_enforced() {
    let fixtures = repo_root().join("tests/fixtures/tls");
    let dir = TempDir::new("web-versions");
    let web = dir.path().join("web.yml");
    let tls12_client = |suites: &[rustls::SupportedCipherSuite]| {
        let mut provider = rustls::crypto::ring::default_provider();
        provider.cipher_suites = suites.to_vec();
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_file(fixtures.join("ca.crt")).unwrap())
            .unwrap();
        Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(provider))
                .with_protocol_versions(&[&rustls::version::TLS12])
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    };
    use rustls::crypto::ring::cipher_suite::{
        TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 as AES128,
        TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 as AES256,
    };
    let start = |extra: &str| {
        std::fs::write(
            &web,
            format!(
                "tls_server_config:\n  cert_file: {0}/server.crt\n  key_file: {0}/server.key\n{extra}",
                fixtures.display()
            ),
        )
        .unwrap();
        let exporter =
            Exporter::spawn(&["--demo", "--web.config.file", web.to_str().unwrap()], &[]);
        let modern = tls_client(None);
        exporter.wait_for(|| tls_get(&exporter, &modern, "/healthz").is_ok());
        exporter
    };

    let exporter = start("  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n");
    assert_eq!(
        tls_get(&exporter, &tls12_client(&[AES128]), "/healthz")
            .unwrap()
            .0
            .status,
        200
    );
    assert!(tls_get(&exporter, &tls12_client(&[AES256]), "/healthz").is_err());
    drop(exporter);

    let exporter = start("  min_version: TLS13\n");
    assert!(tls_get(&exporter, &tls12_client(&[AES128, AES256]), "/healthz").is_err());
}
