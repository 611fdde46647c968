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
use common::{Exporter, Scenario};
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
