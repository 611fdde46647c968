//! Helpers shared by the integration tests: a strict exposition parser, a tiny HTTP client
//! and a handle on the real exporter binary.
#![allow(dead_code)] // each test binary uses a different subset

pub mod exposition;
pub mod http;
pub mod scenario;

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The exporter binary Cargo built for this test run.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_gpu-bottleneck-exporter")
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The fake NVML library built in this workspace (`old`: the build lacking newer symbols).
pub fn fake_nvml(old: bool) -> PathBuf {
    let name = if old {
        "libfake_nvml_old.so"
    } else {
        "libfake_nvml.so"
    };
    let path = Path::new(binary()).parent().unwrap().join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace first (cargo build --workspace; scripts/test.sh does)",
        path.display()
    );
    path
}

/// A loopback address with a port that was free a moment ago.
pub fn free_address() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().unwrap()
}

/// A fresh empty directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("gbe-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running exporter, killed on drop.
pub struct Exporter {
    pub child: Child,
    pub address: SocketAddr,
}

impl Exporter {
    /// Starts the binary listening on a free loopback port with the extra `args`.
    pub fn start(args: &[&str]) -> Exporter {
        Exporter::start_with_env(args, &[])
    }

    /// Like `start`, with extra environment variables.
    pub fn start_with_env(args: &[&str], env: &[(&str, &Path)]) -> Exporter {
        Exporter::start_wrapped(&[], args, env)
    }

    /// Like `start_with_env`, run through `wrapper`.
    pub fn start_wrapped(wrapper: &[&str], args: &[&str], env: &[(&str, &Path)]) -> Exporter {
        let exporter = Exporter::spawn_wrapped(wrapper, args, env);
        let address = exporter.address;
        exporter.wait_for(|| {
            http::get(address, "/healthz", &[])
                .map(|r| r.status == 200)
                .unwrap_or(false)
        });
        exporter
    }

    /// Starts the binary without waiting for it to answer (over TLS plain HTTP never will).
    pub fn spawn(args: &[&str], env: &[(&str, &Path)]) -> Exporter {
        Exporter::spawn_wrapped(&[], args, env)
    }

    /// Like `spawn`, run through `wrapper` (e.g. `setpriv --reuid=65534 ... --`).
    pub fn spawn_wrapped(wrapper: &[&str], args: &[&str], env: &[(&str, &Path)]) -> Exporter {
        let address = free_address();
        let mut command = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut command = Command::new(program);
                command.args(rest).arg(binary());
                command
            }
            None => Command::new(binary()),
        };
        let child = command
            .envs(env.iter().map(|(k, v)| (k, v.as_os_str())))
            .arg("serve")
            .arg("--listen")
            .arg(address.to_string())
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the exporter");
        Exporter { child, address }
    }

    /// Polls `condition` every 20 ms for up to 10 s.
    pub fn wait_for(&self, condition: impl FnMut() -> bool) {
        self.wait_within(Duration::from_secs(10), condition);
    }

    /// Waits up to `limit` for `condition`, panicking past it.
    pub fn wait_within(&self, limit: Duration, mut condition: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if condition() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("condition not met within {limit:?}");
    }

    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> http::Response {
        http::get(self.address, path, headers).expect("HTTP request")
    }

    /// `/metrics` in the classic format, parsed strictly.
    pub fn metrics(&self) -> Vec<exposition::Family> {
        let response = self.get("/metrics", &[]);
        assert_eq!(response.status, 200);
        exposition::parse(&response.text(), false).expect("strict parse of /metrics")
    }

    /// Waits until `/metrics` satisfies `condition`, and returns that page.
    pub fn metrics_when(
        &self,
        condition: impl FnMut(&[exposition::Family]) -> bool,
    ) -> Vec<exposition::Family> {
        self.metrics_within(Duration::from_secs(10), condition)
    }

    /// `/metrics` once `condition` holds on it, waiting up to `limit`.
    pub fn metrics_within(
        &self,
        limit: Duration,
        mut condition: impl FnMut(&[exposition::Family]) -> bool,
    ) -> Vec<exposition::Family> {
        let mut page = Vec::new();
        self.wait_within(limit, || {
            // 503 until the first sample is published.
            let response = self.get("/metrics", &[]);
            if response.status != 200 {
                return false;
            }
            page = exposition::parse(&response.text(), false).expect("strict parse of /metrics");
            condition(&page)
        });
        page
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Both formats of a snapshot as the golden files hold them: source and tick durations and the
/// build commit pinned (they change from run to run), sample age 0.
pub fn render_pinned(snapshot: &gpu_bottleneck_exporter::snapshot::Snapshot) -> (String, String) {
    use gpu_bottleneck_exporter::exposition::{render, Format};
    let mut snapshot = snapshot.clone();
    snapshot.node = "test-node".into(); // NODE_NAME or the hostname otherwise
    for status in &mut snapshot.sources {
        status.duration_seconds = 0.001;
    }
    let exposition = render(snapshot, 0.002, Instant::now(), Default::default());
    let pin = |format| {
        let body =
            String::from_utf8(exposition.body(format, exposition.sampled_at, &Default::default()))
                .unwrap();
        let commit = body.find("commit=\"").unwrap() + 8;
        let end = commit + body[commit..].find('"').unwrap();
        format!("{}test{}", &body[..commit], &body[end..])
    };
    (pin(Format::Text), pin(Format::OpenMetrics))
}

/// Checks both formats against `tests/golden/<name>.{prom,om.txt}` and parses them strictly;
/// returns the classic format's families.
pub fn check_goldens(
    name: &str,
    (text, openmetrics): &(String, String),
) -> Vec<exposition::Family> {
    let dir = repo_root().join("tests/golden");
    check_golden(&dir.join(format!("{name}.prom")), text);
    check_golden(&dir.join(format!("{name}.om.txt")), openmetrics);
    exposition::parse(openmetrics, true).unwrap_or_else(|e| panic!("{name} OpenMetrics: {e}"));
    exposition::parse(text, false).unwrap_or_else(|e| panic!("{name} text: {e}"))
}

/// Asserts `actual` is `Some(expected)` up to floating-point rounding.
#[track_caller]
pub fn assert_close(actual: Option<f64>, expected: f64) {
    let actual = actual.unwrap_or_else(|| panic!("no value, expected {expected}"));
    assert!(
        (actual - expected).abs() <= 1e-9 * expected.abs().max(1.0),
        "{actual} != {expected}"
    );
}

/// Compares `actual` with the golden file at `path`; `UPDATE_GOLDEN=1` rewrites it instead.
pub fn check_golden(path: &Path, actual: &str) {
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with UPDATE_GOLDEN=1 to create it",
            path.display()
        )
    });
    if expected != actual {
        let diff: Vec<String> = expected
            .lines()
            .zip(actual.lines())
            .filter(|(e, a)| e != a)
            .take(5)
            .map(|(e, a)| format!("- {e}\n+ {a}"))
            .collect();
        panic!(
            "{} differs from the output (UPDATE_GOLDEN=1 to accept):\n{}",
            path.display(),
            diff.join("\n")
        );
    }
}

/// A scenario file the fake library re-reads when it changes.
pub struct Scenario {
    dir: TempDir,
}

impl Scenario {
    pub fn new(yaml: &str) -> Scenario {
        let scenario = Scenario {
            dir: TempDir::new("scenario"),
        };
        scenario.write(yaml);
        scenario
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("scenario.yaml")
    }

    /// Replaces the scenario atomically, so the library never reads half a file.
    pub fn write(&self, yaml: &str) {
        let staging = self.dir.path().join("next.yaml");
        std::fs::write(&staging, yaml).unwrap();
        std::fs::rename(&staging, self.path()).unwrap();
    }

    /// Starts the exporter (GPU and cpu sources only, 200 ms ticks) on `library`.
    pub fn start(&self, library: &Path, extra_config: &str) -> Exporter {
        self.start_wrapped(&[], library, extra_config)
    }

    /// Like `start`, run through `wrapper`.
    pub fn start_wrapped(&self, wrapper: &[&str], library: &Path, extra_config: &str) -> Exporter {
        let config = self.dir.path().join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "sample_interval: 200ms\nsources:\n  disk: {{enabled: false}}\n  pressure: {{enabled: false}}\n  memory: {{enabled: false}}\n  gpu:\n    nvml_library: {}\n    nvml_retry_max_interval: 1s\n{extra_config}",
                library.display()
            ),
        )
        .unwrap();
        Exporter::start_wrapped(
            wrapper,
            &["--config", config.to_str().unwrap()],
            &[("FAKE_NVML_SCENARIO", &self.path())],
        )
    }
}

/// A child process killed when the test ends, pass or fail: a leaked one would keep the test
/// runner's output pipe open (or burn a CPU). A child started in a process group of its own
/// (`process_group(0)`) takes its descendants with it.
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        // ESRCH unless the child leads a group.
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
