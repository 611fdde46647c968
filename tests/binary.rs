//! The real binary on loopback: configuration errors, readiness, both formats, gzip,
//! a stuck source, and graceful shutdown.

mod common;

use std::io::Read;
use std::process::Command;
use std::time::{Duration, Instant};

use common::exposition::{self as strict, value};
use common::{Exporter, TempDir};

#[test]
fn bad_config_is_refused_with_file_line_and_column() {
    let dir = TempDir::new("badconfig");
    let cases = [
        (
            "sources:\n  disk:\n    exclud: x\n",
            "line 3 column 5",
            "unknown field `exclud`",
        ),
        (
            "sample_interval: 0s\n",
            "line 1 column 18",
            "positive duration",
        ),
        ("listen_address: nowhere\n", "line 1 column 17", "HOST:PORT"),
        (
            "sources:\n  disk:\n    include: '[a-'\n",
            "line 3 column 14",
            "invalid regex",
        ),
        (
            "sources:\n  cpu:\n    enabled: 3\n",
            "line 3 column 14",
            "bool",
        ),
        (
            "metrics:\n  exclude: ['gpu_(xid']\n",
            "line 2 column 13",
            "invalid metric family pattern",
        ),
    ];
    for (yaml, position, expected) in cases {
        let file = dir.path().join("config.yaml");
        std::fs::write(&file, yaml).unwrap();
        let output = Command::new(common::binary())
            .args(["serve", "--config"])
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{yaml}: {stderr}");
        assert!(stderr.contains(&file.display().to_string()), "{stderr}");
        assert!(stderr.contains(position), "{yaml}: {stderr}");
        assert!(stderr.contains(expected), "{yaml}: {stderr}");
    }
    let missing = Command::new(common::binary())
        .args(["--config", "/nonexistent/config.yaml"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/config.yaml"));
}

#[test]
fn version_flag_prints_the_version() {
    let output = Command::new(common::binary())
        .arg("--version")
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn metrics_in_both_formats_gzip_and_flags_over_file() {
    let dir = TempDir::new("formats");
    let file = dir.path().join("config.yaml");
    // The file points procfs nowhere and listens elsewhere; the flags must win over both.
    std::fs::write(
        &file,
        "listen_address: 127.0.0.1:1\npaths:\n  procfs: /nonexistent\nsample_interval: 200ms\n",
    )
    .unwrap();
    let exporter = Exporter::start(&["--config", file.to_str().unwrap(), "--path.procfs", "/proc"]);
    exporter.wait_for(|| exporter.get("/readyz", &[]).status == 200);

    let text = exporter.get("/metrics", &[]);
    assert_eq!(text.status, 200);
    assert_eq!(
        text.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let families = strict::parse(&text.text(), false).unwrap();
    assert_eq!(
        value(&families, "gpu_exporter_source_up", &[("source", "cpu")]),
        Some(1.0)
    );
    assert!(value(&families, "gpu_host_cpus", &[]).unwrap() >= 1.0);

    let prometheus_accept =
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let openmetrics = exporter.get("/metrics", &[("Accept", prometheus_accept)]);
    assert!(openmetrics
        .header("content-type")
        .unwrap()
        .starts_with("application/openmetrics-text; version=1.0.0"));
    let body = openmetrics.text();
    assert!(body.ends_with("# EOF\n"));
    strict::parse(&body, true).unwrap();

    let gzipped = exporter.get("/metrics", &[("Accept-Encoding", "gzip")]);
    assert_eq!(gzipped.header("content-encoding"), Some("gzip"));
    let mut decoded = String::new();
    flate2::read::GzDecoder::new(&gzipped.body[..])
        .read_to_string(&mut decoded)
        .unwrap();
    strict::parse(&decoded, false).unwrap();
    assert!(
        gzipped.body.len() < decoded.len() / 3,
        "gzip should shrink the page"
    );

    assert_eq!(exporter.get("/nope", &[]).status, 404);
    let landing = exporter.get("/", &[]);
    assert!(landing.text().contains("href=\"/metrics\""));
    let head = common::http::request(exporter.address, "HEAD", "/metrics", &[]).unwrap();
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
}

/// A procfs whose `stat` is a FIFO: the sampler's read blocks until the test writes to it,
/// which is how a hung /proc read (or later, a hung NVML call) looks to the daemon.
#[test]
fn readiness_flips_on_first_sample_and_a_stuck_source_shows_as_growing_age() {
    let dir = TempDir::new("fifo");
    let procfs = dir.path().join("proc");
    std::fs::create_dir_all(&procfs).unwrap();
    let fifo = procfs.join("stat");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "sample_interval: 100ms\nsources:\n  disk: {enabled: false}\n  pressure: {enabled: false}\n  memory: {enabled: false}\n",
    )
    .unwrap();
    let exporter = Exporter::start(&[
        "--config",
        file.to_str().unwrap(),
        "--path.procfs",
        procfs.to_str().unwrap(),
    ]);

    // The HTTP side answers while the sampler is blocked in its very first read.
    assert_eq!(exporter.get("/healthz", &[]).status, 200);
    assert_eq!(exporter.get("/readyz", &[]).status, 503);
    assert_eq!(exporter.get("/metrics", &[]).status, 503);

    std::fs::write(&fifo, "cpu 1 2 3 4 5 6 7 8 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nctxt 9\nprocs_running 2\nprocs_blocked 1\n").unwrap();
    exporter.wait_for(|| exporter.get("/readyz", &[]).status == 200);
    let first = strict::parse(&exporter.get("/metrics", &[]).text(), false).unwrap();
    assert_eq!(value(&first, "gpu_host_tasks_blocked", &[]), Some(1.0));

    // The second tick blocks on the FIFO again: /metrics keeps answering from the last
    // snapshot while the sample age grows past many intervals.
    std::thread::sleep(Duration::from_millis(1200));
    let later = strict::parse(&exporter.get("/metrics", &[]).text(), false).unwrap();
    let age = value(&later, "gpu_exporter_sample_age_seconds", &[]).unwrap();
    assert!(
        age > 1.0,
        "sample age {age} should grow while the sampler is stuck"
    );
    assert_eq!(value(&later, "gpu_exporter_samples_total", &[]), Some(1.0));

    // Shutdown does not wait for the stuck read.
    let mut exporter = exporter;
    let started = Instant::now();
    assert!(Command::new("kill")
        .args(["-TERM", &exporter.child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let status = exporter.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn sigint_and_sigterm_shut_down_cleanly() {
    for signal in ["-INT", "-TERM"] {
        let mut exporter = Exporter::start(&[]);
        exporter.wait_for(|| exporter.get("/readyz", &[]).status == 200);
        assert!(Command::new("kill")
            .args([signal, &exporter.child.id().to_string()])
            .status()
            .unwrap()
            .success());
        let status = exporter.child.wait().unwrap();
        assert!(status.success(), "{signal}: {status:?}");
        let mut stderr = String::new();
        exporter
            .child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert!(stderr.contains("shutting down"), "{stderr}");
        assert!(
            common::http::get(exporter.address, "/healthz", &[]).is_err(),
            "port still open after exit"
        );
    }
}
