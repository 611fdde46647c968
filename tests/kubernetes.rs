//! Pod attribution against an in-test gRPC server that speaks the kubelet's pod-resources v1
//! API on a unix socket: GPUs, MIG devices and time-slicing replicas matched to pods, the
//! labels on GPU and verdict series, allocated-but-idle GPUs, an answer larger than gRPC's
//! default 4 MiB limit, and the socket disappearing and coming back.

mod common;

use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use common::exposition::{value, Family};
use common::{Exporter, Reaped, Scenario};
use gpu_bottleneck_exporter::source::kubernetes::proto::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices,
    ContainerResources, ListPodResourcesRequest, ListPodResourcesResponse, PodResources,
};
use tonic::codegen::http;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The answers the fake kubelet gives to `List` and `GetAllocatableResources`.
#[derive(Clone, Default)]
struct Lister {
    answer: Arc<Mutex<ListPodResourcesResponse>>,
    allocatable: Arc<Mutex<AllocatableResourcesResponse>>,
}

impl tonic::server::NamedService for Lister {
    const NAME: &'static str = "v1.PodResourcesLister";
}

/// A unary method that answers `R` whatever it is asked.
struct Reply<R>(R);

impl<Q: Send + 'static, R: Clone + Send + 'static> tonic::server::UnaryService<Q> for Reply<R> {
    type Response = R;
    type Future = BoxFuture<Result<tonic::Response<R>, tonic::Status>>;
    fn call(&mut self, _: tonic::Request<Q>) -> Self::Future {
        let answer = self.0.clone();
        Box::pin(async move { Ok(tonic::Response::new(answer)) })
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for Lister {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let (answer, allocatable) = (
            self.answer.lock().unwrap().clone(),
            self.allocatable.lock().unwrap().clone(),
        );
        Box::pin(async move {
            Ok(match request.uri().path() {
                "/v1.PodResourcesLister/List" => {
                    let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<
                        ListPodResourcesResponse,
                        ListPodResourcesRequest,
                    >::default())
                    .max_encoding_message_size(usize::MAX);
                    grpc.unary(Reply(answer), request).await
                }
                "/v1.PodResourcesLister/GetAllocatableResources" => {
                    let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<
                        AllocatableResourcesResponse,
                        AllocatableResourcesRequest,
                    >::default());
                    grpc.unary(Reply(allocatable), request).await
                }
                _ => tonic::Status::unimplemented("not served by this fake kubelet").into_http(),
            })
        })
    }
}

/// A kubelet socket served from a thread of its own until dropped.
struct Kubelet {
    socket: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Kubelet {
    fn serve(socket: &Path, lister: Lister) -> Kubelet {
        let _ = std::fs::remove_file(socket);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let path = socket.to_path_buf();
        let (ready, is_ready) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::UnixListener::bind(&path).unwrap();
                // As the kubelet leaves it: owned by root, writable by root only (umask 022).
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
                ready.send(()).unwrap();
                let server = tonic::transport::Server::builder()
                    .add_service(lister)
                    .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener));
                // Stopping drops the server mid-flight, connections and all: a kubelet restart.
                tokio::select! {
                    result = server => result.unwrap(),
                    _ = stopped => {}
                }
            });
        });
        is_ready.recv().unwrap();
        Kubelet {
            socket: socket.to_path_buf(),
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        let _ = self.stop.take().unwrap().send(());
        let _ = self.thread.take().unwrap().join();
        let _ = std::fs::remove_file(&self.socket);
    }
}

fn pod(namespace: &str, name: &str, container: &str, resource: &str, ids: &[&str]) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: namespace.into(),
        containers: vec![ContainerResources {
            name: container.into(),
            devices: vec![ContainerDevices {
                resource_name: resource.into(),
                device_ids: ids.iter().map(|s| s.to_string()).collect(),
            }],
        }],
    }
}

const SCENARIO: &str = "devices:
  - uuid: GPU-whole
    utilization_gpu: 60
    processes:
      - {pid: 3999990, used_memory: 1000, sm: 50}
  - uuid: GPU-migs
    mig_mode: true
    mig:
      - {uuid: MIG-one, gpu_instance_id: 1, memory_total: 1000}
  - uuid: GPU-shared
  - uuid: GPU-free
";

fn start(scenario: &Scenario, socket: &Path, extra: &str) -> Exporter {
    scenario.start(
        &common::fake_nvml(false),
        &format!("{extra}  kubernetes:\n    pod_resources_socket: {}\n    refresh_interval: 200ms\n    allocated_idle_after: 1s\n", socket.display()),
    )
}

fn pod_of(page: &[Family], gpu: &str) -> Option<(String, String, String)> {
    page.iter()
        .flat_map(|f| &f.samples)
        .find(|s| s.name == "gpu_verdict" && s.labels["gpu"] == gpu)
        .map(|s| {
            (
                s.labels["namespace"].clone(),
                s.labels["pod"].clone(),
                s.labels["container"].clone(),
            )
        })
}

#[test]
fn gpus_migs_and_replicas_are_attributed_and_labelled() {
    let scenario = Scenario::new(SCENARIO);
    let socket = scenario.path().with_file_name("kubelet.sock");
    let lister = Lister::default();
    *lister.answer.lock().unwrap() = ListPodResourcesResponse {
        pod_resources: vec![
            pod("ml", "train-0", "trainer", "nvidia.com/gpu", &["GPU-whole"]),
            pod(
                "ml",
                "infer-1",
                "server",
                "nvidia.com/mig-1g.10gb",
                &["MIG-one"],
            ),
            pod(
                "lab",
                "nb-a",
                "jupyter",
                "nvidia.com/gpu",
                &["GPU-shared::0"],
            ),
            pod(
                "lab",
                "nb-b",
                "jupyter",
                "nvidia.com/gpu",
                &["GPU-shared::1"],
            ),
        ],
    };
    let _kubelet = Kubelet::serve(&socket, lister);
    let exporter = start(&scenario, &socket, "");
    let page = exporter.metrics_when(|p| {
        value(p, "gpu_pod_info", &[("pod", "nb-b")]).is_some()
            && value(
                p,
                "gpu_allocated_idle",
                &[("gpu", "2"), ("pod", "nb-a,nb-b")],
            ) == Some(1.0)
    });
    assert_eq!(
        value(
            &page,
            "gpu_pod_info",
            &[
                ("uuid", "GPU-whole"),
                ("namespace", "ml"),
                ("pod", "train-0"),
                ("container", "trainer")
            ]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &page,
            "gpu_pod_info",
            &[("uuid", "GPU-migs"), ("pod", "infer-1")]
        ),
        Some(1.0),
        "matched through its MIG device"
    );
    assert_eq!(
        pod_of(&page, "0"),
        Some(("ml".into(), "train-0".into(), "trainer".into()))
    );
    assert_eq!(
        pod_of(&page, "2"),
        Some(("lab".into(), "nb-a,nb-b".into(), "jupyter".into())),
        "time-sliced: both pods"
    );
    assert_eq!(
        pod_of(&page, "3"),
        Some((String::new(), String::new(), String::new())),
        "unassigned"
    );
    // GPU 0 runs a process: assigned and busy is not allocated-idle; GPU 2 has none.
    assert_eq!(
        value(&page, "gpu_allocated_idle", &[("gpu", "0")]),
        Some(0.0)
    );
    assert_eq!(
        value(&page, "gpu_allocated_idle", &[("gpu", "3")]),
        None,
        "only assigned GPUs"
    );
    assert_eq!(
        value(&page, "gpu_exporter_source_up", &[("source", "kubernetes")]),
        Some(1.0)
    );
}

#[test]
fn an_answer_over_four_mebibytes_is_read() {
    let scenario = Scenario::new(SCENARIO);
    let socket = scenario.path().with_file_name("kubelet.sock");
    let lister = Lister::default();
    // 60,000 pods with a device each: about 5 MiB, past gRPC's default 4 MiB message limit.
    let mut pods: Vec<PodResources> = (0..60_000)
        .map(|i| {
            pod(
                "bulk",
                &format!("pod-{i:05}"),
                "c",
                "example.com/nic",
                &[&format!("nic-{i}")],
            )
        })
        .collect();
    pods.push(pod(
        "ml",
        "train-0",
        "trainer",
        "nvidia.com/gpu",
        &["GPU-whole"],
    ));
    *lister.answer.lock().unwrap() = ListPodResourcesResponse {
        pod_resources: pods,
    };
    let _kubelet = Kubelet::serve(&socket, lister);
    let exporter = start(&scenario, &socket, "");
    let page = exporter.metrics_when(|p| value(p, "gpu_pod_info", &[("pod", "train-0")]).is_some());
    assert_eq!(
        value(&page, "gpu_exporter_source_up", &[("source", "kubernetes")]),
        Some(1.0)
    );
}

#[test]
fn the_socket_disappearing_keeps_the_last_answer_and_recovers() {
    let scenario = Scenario::new(SCENARIO);
    let socket = scenario.path().with_file_name("kubelet.sock");
    let lister = Lister::default();
    *lister.answer.lock().unwrap() = ListPodResourcesResponse {
        pod_resources: vec![pod(
            "ml",
            "train-0",
            "trainer",
            "nvidia.com/gpu",
            &["GPU-whole"],
        )],
    };
    let kubelet = Kubelet::serve(&socket, lister.clone());
    let exporter = start(&scenario, &socket, "");
    exporter.metrics_when(|p| pod_of(p, "0").is_some_and(|(_, pod, _)| pod == "train-0"));

    drop(kubelet); // the kubelet restarts: its socket is gone for a while
    let page = exporter.metrics_when(|p| {
        value(p, "gpu_exporter_source_up", &[("source", "kubernetes")]) == Some(0.0)
    });
    assert_eq!(
        pod_of(&page, "0").unwrap().1,
        "train-0",
        "the last answer is kept meanwhile"
    );
    assert_eq!(
        value(
            &page,
            "gpu_exporter_source_supported",
            &[("source", "kubernetes")]
        ),
        Some(1.0)
    );

    *lister.answer.lock().unwrap() = ListPodResourcesResponse {
        pod_resources: vec![pod(
            "ml",
            "train-1",
            "trainer",
            "nvidia.com/gpu",
            &["GPU-whole"],
        )],
    };
    let _kubelet = Kubelet::serve(&socket, lister);
    let page = exporter.metrics_when(|p| {
        value(p, "gpu_exporter_source_up", &[("source", "kubernetes")]) == Some(1.0)
            && pod_of(p, "0").is_some_and(|(_, pod, _)| pod == "train-1")
    });
    assert_eq!(
        value(&page, "gpu_pod_info", &[("pod", "train-0")]),
        None,
        "no stale pod series"
    );
}

#[test]
fn pod_series_match_the_golden_file() {
    use gpu_bottleneck_exporter::snapshot::{GpuDevice, GpuSnapshot, PodRef, Snapshot};
    let owner = |namespace: &str, pod: &str| PodRef {
        namespace: namespace.into(),
        pod: pod.into(),
        container: "main".into(),
    };
    let snapshot = Snapshot {
        gpu: Some(GpuSnapshot {
            nvml_up: true,
            devices: vec![
                GpuDevice {
                    index: 0,
                    uuid: "GPU-a".into(),
                    up: true,
                    pods: vec![owner("ml", "train-0")],
                    allocatable: Some(true),
                    ..GpuDevice::default()
                },
                GpuDevice {
                    index: 1,
                    uuid: "GPU-b".into(),
                    up: true,
                    pods: vec![owner("lab", "nb-a"), owner("lab", "nb-b")],
                    allocated_idle_seconds: Some(900.0),
                    allocated_idle: true,
                    ..GpuDevice::default()
                },
            ],
            ..GpuSnapshot::default()
        }),
        ..Snapshot::default()
    };
    let page = common::check_goldens("pods", &common::render_pinned(&snapshot));
    assert_eq!(
        value(
            &page,
            "gpu_allocated_idle",
            &[("gpu", "1"), ("pod", "nb-a,nb-b")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&page, "gpu_pod_info", &[("gpu", "1"), ("pod", "nb-b")]),
        Some(1.0)
    );
    assert_eq!(
        value(&page, "gpu_info", &[("gpu", "0"), ("node", "test-node")]),
        Some(1.0)
    );
}

/// The exporter as deployed: as nobody (65534) and as uid 0, both with every capability
/// dropped, against a root-owned rank, a process of another user, a root process without
/// capabilities, and a kubelet socket made as the kubelet makes it. Nobody cannot connect to
/// the socket (write permission is needed) and says so; uid 0 can, without any capability.
/// `/proc/<pid>/io` passes the kernel's ptrace check only for the same uid *and* when the
/// reader's capabilities cover the target's, so without CAP_SYS_PTRACE uid 0 reads it only for
/// root processes that hold no capabilities either. The verdicts come out either way.
#[test]
fn least_privilege_signals_as_nobody_and_as_root_without_capabilities() {
    if unsafe { libc::geteuid() } != 0 || !Path::new("/usr/bin/setpriv").exists() {
        eprintln!(
            "skipped: needs root and setpriv (util-linux) to run the exporter as another user"
        );
        return;
    }
    let mut rank = Reaped(
        std::process::Command::new("python3")
            .arg(common::repo_root().join("bench/rank.py"))
            .args(["--threads", "8", "--workers", "2", "--worker-threads", "2"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(rank.0.stdout.as_mut().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert_eq!(ready.trim(), "ready");
    let foreign = Reaped(
        std::process::Command::new("setpriv")
            .args([
                "--reuid=1234",
                "--regid=1234",
                "--clear-groups",
                "sleep",
                "120",
            ])
            .spawn()
            .unwrap(),
    );
    let capless = Reaped(
        std::process::Command::new("setpriv")
            .args(["--inh-caps=-all", "--bounding-set=-all", "sleep", "120"])
            .spawn()
            .unwrap(),
    );
    // A CPU hog of root's outside every GPU process tree: the culprit to name. Favoured by
    // the scheduler (nice -10, which execs the shell under the same pid), so that it stays
    // among the node's busiest while the other tests' loops share the CPUs.
    let hog = Reaped(
        std::process::Command::new("nice")
            .args(["-n", "-10", "sh", "-c", "while :; do :; done"])
            .spawn()
            .unwrap(),
    );
    // GPU-shared holds two independent jobs (contention): the culprits are looked for. The
    // second is a grandchild of the test (another parent than `foreign`'s: another job).
    let holder = Reaped(
        std::process::Command::new("sh")
            .args(["-c", "sleep 120; :"])
            // Its sleep outlives the shell on a failure: it must not hold the test's output.
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let children = format!("/proc/{0}/task/{0}/children", holder.0.id());
    let grandchild = (0..100)
        .find_map(|_| {
            let found = std::fs::read_to_string(&children)
                .ok()?
                .trim()
                .parse::<u32>()
                .ok();
            if found.is_none() {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            found
        })
        .expect("the holder's sleep");
    let scenario = Scenario::new(&format!(
        "devices:\n  - uuid: GPU-rank\n    utilization_gpu: 20\n    processes:\n      - {{pid: {}, used_memory: 1000, sm: 20}}\n  - uuid: GPU-other\n    utilization_gpu: 20\n    processes:\n      - {{pid: {}, used_memory: 1000, sm: 20}}\n  - uuid: GPU-capless\n    utilization_gpu: 20\n    processes:\n      - {{pid: {}, used_memory: 1000, sm: 20}}\n  - uuid: GPU-shared\n    utilization_gpu: 20\n    processes:\n      - {{pid: {}, used_memory: 1000, sm: 10}}\n      - {{pid: {}, used_memory: 900, sm: 10}}\n",
        rank.0.id(),
        foreign.0.id(),
        capless.0.id(),
        foreign.0.id(),
        grandchild
    ));
    let socket = scenario.path().with_file_name("kubelet.sock");
    let lister = Lister::default();
    *lister.answer.lock().unwrap() = ListPodResourcesResponse {
        pod_resources: vec![pod(
            "ml",
            "train-0",
            "trainer",
            "nvidia.com/gpu",
            &["GPU-rank"],
        )],
    };
    let _kubelet = Kubelet::serve(&socket, lister);
    let config = format!(
        "  culprits: {{interval: 1s}}\n  kubernetes:\n    pod_resources_socket: {}\n    refresh_interval: 200ms\nanalysis:\n  window: 3s\n  min_duration: 1s\n",
        socket.display()
    );
    let drop_all = ["--inh-caps=-all", "--bounding-set=-all", "--"];
    let runs = [
        (
            "nobody",
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ],
        ),
        (
            "root",
            ["setpriv", "--reuid=0", "--regid=0", "--clear-groups"],
        ),
    ];
    for (who, user) in runs {
        let wrapper: Vec<&str> = user.iter().chain(&drop_all).copied().collect();
        let mut exporter = scenario.start_wrapped(&wrapper, &common::fake_nvml(false), &config);
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", exporter.child.id())).unwrap();
        assert!(
            status.lines().any(|l| l == "CapEff:\t0000000000000000"),
            "{who}: capabilities left: {status}"
        );
        let rank_pid = rank.0.id().to_string();
        let foreign_pid = foreign.0.id().to_string();
        let capless_pid = capless.0.id().to_string();
        let hog_pid = hog.0.id().to_string();
        let kubernetes_up =
            |p: &[Family]| value(p, "gpu_exporter_source_up", &[("source", "kubernetes")]);
        let page = exporter.metrics_when(|p| {
            value(p, "gpu_process_workers", &[("pid", &rank_pid)]) == Some(2.0)
                && value(
                    p,
                    "gpu_process_busiest_thread_cpu_ratio",
                    &[("pid", &rank_pid)],
                )
                .is_some()
                && p.iter()
                    .any(|f| f.name == "gpu_verdict" && f.samples.len() == 4)
                && value(p, "gpu_host_top_process_cpu_cores", &[("pid", &hog_pid)]).is_some()
                && value(
                    p,
                    "gpu_exporter_source_errors_total",
                    &[("source", "kubernetes")],
                )
                .is_some_and(|n| n >= 1.0)
                    == (who == "nobody")
                && kubernetes_up(p) == Some(if who == "nobody" { 0.0 } else { 1.0 })
                && value(
                    p,
                    "gpu_exporter_signal_supported",
                    &[("signal", "python_stacks")],
                ) == Some(0.0)
        });
        // Readable without privilege: process CPU, threads, workers, cgroup, and so verdicts.
        for pid in [&rank_pid, &foreign_pid] {
            assert!(
                value(&page, "gpu_process_cpu_cores", &[("pid", pid)]).is_some(),
                "{who} {pid}"
            );
            assert!(
                value(&page, "gpu_process_threads", &[("pid", pid)]).is_some(),
                "{who} {pid}"
            );
        }
        assert!(value(
            &page,
            "gpu_bottleneck_score",
            &[("gpu", "0"), ("kind", "host_bound")]
        )
        .is_some());
        assert!(value(
            &page,
            "gpu_bottleneck_score",
            &[("gpu", "0"), ("kind", "data_cpu")]
        )
        .is_some());
        let read_bytes = |pid: &str| value(&page, "gpu_process_read_bytes_total", &[("pid", pid)]);
        assert_eq!(
            value(
                &page,
                "gpu_exporter_signal_supported",
                &[("signal", "process_read_bytes")]
            ),
            Some(0.0),
            "{who}: another user's io is never readable without CAP_SYS_PTRACE"
        );
        assert_eq!(read_bytes(&foreign_pid), None, "{who}");
        assert_eq!(
            read_bytes(&rank_pid),
            None,
            "{who}: the rank holds capabilities the exporter lacks"
        );
        // The node's busiest process is named from its stat (readable by anyone); its disk
        // bytes are root's, unreadable without CAP_SYS_PTRACE, and said so.
        assert!(
            value(
                &page,
                "gpu_host_top_process_cpu_cores",
                &[("pid", &hog_pid)]
            )
            .is_some_and(|cores| cores > 0.3),
            "{who}: the hog named by CPU"
        );
        assert_eq!(
            value(
                &page,
                "gpu_exporter_signal_supported",
                &[("signal", "node_process_disk_bytes")]
            ),
            Some(0.0),
            "{who}: root's io needs CAP_SYS_PTRACE"
        );
        // The rank is a Python process of root's holding capabilities the exporter lacks: its
        // stacks are refused in both runs, reported unsupported, and nothing else changes.
        assert_eq!(
            value(
                &page,
                "gpu_exporter_signal_supported",
                &[("signal", "python_stacks")]
            ),
            Some(0.0),
            "{who}: stacks need ptrace access"
        );
        assert_eq!(
            value(
                &page,
                "gpu_process_activity_ratio",
                &[("pid", &rank_pid), ("activity", "python")]
            ),
            None,
            "{who}"
        );
        // What the rank's sleeping workers wait on needs ptrace access too: unsupported, no
        // series, and their sleep is taken for input as before (inferred).
        assert_eq!(
            value(
                &page,
                "gpu_exporter_signal_supported",
                &[("signal", "worker_waits")]
            ),
            Some(0.0),
            "{who}: a worker's system call needs ptrace access"
        );
        assert_eq!(
            value(
                &page,
                "gpu_process_workers_asleep_on",
                &[("pid", &rank_pid), ("on", "idle")]
            ),
            None,
            "{who}"
        );
        let source = |metric: &str, name: &str| value(&page, metric, &[("source", name)]);
        // The CUDA probes need CAP_BPF and CAP_PERFMON: unsupported in both runs, said so,
        // no series of theirs, and the verdicts above as the stacks and counters make them.
        assert_eq!(
            value(
                &page,
                "gpu_exporter_signal_supported",
                &[("signal", "cuda_probes")]
            ),
            Some(0.0),
            "{who}: the probes need CAP_BPF and CAP_PERFMON"
        );
        assert_eq!(
            source("gpu_exporter_source_supported", "cuda"),
            Some(0.0),
            "{who}"
        );
        assert!(
            !page
                .iter()
                .any(|f| f.name.starts_with("gpu_process_cuda_") && !f.samples.is_empty()),
            "{who}: no probe series"
        );
        // The network: interfaces and each process's namespace traffic are anyone's to read;
        // the node's mount statistics (pid 1's mountstats, mode 0400) are uid 0's.
        assert_eq!(
            source("gpu_exporter_source_up", "network"),
            Some(1.0),
            "{who}"
        );
        assert!(
            value(&page, "gpu_process_host_network", &[("pid", &foreign_pid)]).is_some(),
            "{who}: another user's namespace traffic"
        );
        assert_eq!(
            source("gpu_exporter_source_supported", "network_filesystems"),
            Some(if who == "nobody" { 0.0 } else { 1.0 }),
            "{who}"
        );
        let pod = value(&page, "gpu_pod_info", &[("gpu", "0"), ("pod", "train-0")]);
        if who == "nobody" {
            assert_eq!(read_bytes(&capless_pid), None, "root's io is not nobody's");
            assert_eq!(pod, None, "no pods without the socket");
            assert_eq!(
                value(
                    &page,
                    "gpu_exporter_source_supported",
                    &[("source", "kubernetes")]
                ),
                Some(1.0)
            );
            let _ = exporter.child.kill();
            let _ = exporter.child.wait();
            let mut log = String::new();
            std::io::Read::read_to_string(exporter.child.stderr.as_mut().unwrap(), &mut log)
                .unwrap();
            assert!(
                log.contains("permission denied connecting to") && log.contains("runAsUser: 0"),
                "the log says why and what to change: {log}"
            );
        } else {
            assert!(
                read_bytes(&capless_pid).is_some(),
                "uid 0 reads the io of a root process that holds no capabilities either"
            );
            assert_eq!(
                pod,
                Some(1.0),
                "uid 0 connects to the socket without capabilities"
            );
        }
    }
    unsafe { libc::kill(grandchild as i32, libc::SIGKILL) };
}
