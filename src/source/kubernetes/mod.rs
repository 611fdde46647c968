//! Pod attribution: which pod and container each GPU is assigned to, from the kubelet's
//! pod-resources API over its local unix socket. A background thread refreshes the
//! assignment every `refresh_interval` (never per scrape, never on the sampler thread); the
//! source copies the latest answer into the snapshot, matching device ids to GPU UUIDs, MIG
//! UUIDs and time-slicing replicas (`<uuid>::<n>`), and flags GPUs assigned to a pod but idle
//! for `allocated_idle_after`.

pub mod proto;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Source, SourceError};
use crate::config::KubernetesConfig;
use crate::snapshot::{PodRef, Snapshot};

/// The largest pod-resources answer accepted (a busy node lists hundreds of pods).
const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// A device assigned to a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// Device id as the device plugin reports it.
    pub device_id: String,
    /// Extended resource name.
    pub resource: String,
    /// Who has it.
    pub owner: PodRef,
}

/// Flattens a List response into one assignment per device.
pub fn assignments(response: &proto::ListPodResourcesResponse) -> Vec<Assignment> {
    let mut found = Vec::new();
    for pod in &response.pod_resources {
        for container in &pod.containers {
            for devices in &container.devices {
                for id in &devices.device_ids {
                    found.push(Assignment {
                        device_id: id.clone(),
                        resource: devices.resource_name.clone(),
                        owner: PodRef {
                            namespace: pod.namespace.clone(),
                            pod: pod.name.clone(),
                            container: container.name.clone(),
                        },
                    });
                }
            }
        }
    }
    found
}

/// Whether a device id names this GPU: its UUID, one of its MIG devices, or a time-slicing
/// replica `<uuid>::<n>`.
pub fn device_matches(device_id: &str, gpu_uuid: &str, mig_uuids: &[String]) -> bool {
    let base = device_id.split("::").next().unwrap_or(device_id);
    !gpu_uuid.is_empty() && (base == gpu_uuid || mig_uuids.iter().any(|m| m == base))
}

/// The latest answer of the kubelet, shared between the refresh thread and the source.
#[derive(Debug, Default, Clone)]
struct Latest {
    answer: Option<Answer>,
    error: Option<String>,
}

/// What one refresh learns: the assignments (`List`) and the device ids the kubelet can hand
/// out at all (`GetAllocatableResources`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    /// Devices assigned to containers.
    pub assignments: Vec<Assignment>,
    /// Device ids the kubelet manages, assigned or not.
    pub allocatable: Vec<String>,
}

/// Asks the kubelet's pod-resources API once, over its unix socket.
pub async fn ask(socket: &Path) -> Result<Answer, String> {
    use tonic::transport::{Endpoint, Uri};
    let socket_path = socket;
    let socket = socket.to_path_buf();
    // The URI is required by the API but unused: the connector dials the unix socket.
    let channel = Endpoint::try_from("http://localhost")
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(socket).await?,
                ))
            }
        }))
        .await
        .map_err(|e| connect_error(socket_path, &e))?;
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES);
    let list: proto::ListPodResourcesResponse =
        unary(&mut grpc, proto::LIST, proto::ListPodResourcesRequest {}).await?;
    let allocatable: proto::AllocatableResourcesResponse = unary(
        &mut grpc,
        proto::GET_ALLOCATABLE,
        proto::AllocatableResourcesRequest {},
    )
    .await?;
    Ok(Answer {
        assignments: assignments(&list),
        allocatable: allocatable
            .devices
            .into_iter()
            .flat_map(|d| d.device_ids)
            .collect(),
    })
}

/// Why the socket could not be dialled, with the cause tonic wraps; for a refused permission,
/// also what to change (the kubelet creates the socket owned by root, writable by root only,
/// and connecting to a unix socket needs write permission on it).
fn connect_error(socket: &Path, error: &(dyn std::error::Error + 'static)) -> String {
    let mut causes = Vec::new();
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::PermissionDenied {
                return format!(
                    "permission denied connecting to {}: the kubelet creates it owned by root and writable only by root; run the exporter as uid 0 (no capability is needed: runAsUser: 0 with every capability dropped), or give its user write access to the socket",
                    socket.display()
                );
            }
        }
        causes.push(e.to_string());
        cause = e.source();
    }
    format!(
        "cannot connect to {}: {}",
        socket.display(),
        causes.join(": ")
    )
}

async fn unary<Q, R>(
    grpc: &mut tonic::client::Grpc<tonic::transport::Channel>,
    method: &'static str,
    request: Q,
) -> Result<R, String>
where
    Q: prost::Message + Send + Sync + 'static,
    R: prost::Message + Default + Send + Sync + 'static,
{
    grpc.ready().await.map_err(|e| format!("not ready: {e}"))?;
    let codec = tonic_prost::ProstCodec::<Q, R>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(method);
    grpc.unary(tonic::Request::new(request), path, codec)
        .await
        .map(tonic::Response::into_inner)
        .map_err(|status| format!("{method} failed: {} {}", status.code(), status.message()))
}

fn refresh_loop(
    socket: PathBuf,
    interval: Duration,
    latest: Arc<Mutex<Latest>>,
    stop: Arc<AtomicBool>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            latest.lock().unwrap_or_else(|p| p.into_inner()).error =
                Some(format!("cannot start a runtime: {e}"));
            return;
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let result = runtime.block_on(ask(&socket));
        {
            let mut latest = latest.lock().unwrap_or_else(|p| p.into_inner());
            match result {
                Ok(found) => {
                    if latest.error.take().is_some() {
                        tracing::warn!(socket = %socket.display(), "kubelet pod-resources answering again");
                    }
                    latest.answer = Some(found);
                }
                Err(error) => {
                    if latest.error.as_deref() != Some(error.as_str()) {
                        tracing::warn!(socket = %socket.display(), %error, "kubelet pod-resources unavailable; GPUs keep their last known pods until it answers");
                    }
                    latest.error = Some(error);
                }
            }
        }
        // Wait inside the runtime, so the closed channel's connection task can finish, in
        // short steps so a stop is noticed quickly.
        runtime.block_on(async {
            let mut waited = Duration::ZERO;
            while waited < interval && !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
                waited += Duration::from_millis(100);
            }
        });
    }
}

/// The kubernetes source.
pub struct KubernetesSource {
    socket: PathBuf,
    allocated_idle_after: Duration,
    latest: Arc<Mutex<Latest>>,
    stop: Arc<AtomicBool>,
    started: bool,
    refresh_interval: Duration,
    /// Per GPU UUID: since when it has been assigned to a pod and idle.
    idle_since: HashMap<String, Duration>,
}

impl KubernetesSource {
    /// A source reading the kubelet socket configured in `config`.
    pub fn new(config: KubernetesConfig) -> Self {
        KubernetesSource {
            socket: config.pod_resources_socket,
            allocated_idle_after: config.allocated_idle_after.0,
            latest: Arc::default(),
            stop: Arc::default(),
            started: false,
            refresh_interval: config.refresh_interval.0,
            idle_since: HashMap::new(),
        }
    }

    fn start(&mut self) {
        let (socket, interval, latest, stop) = (
            self.socket.clone(),
            self.refresh_interval,
            self.latest.clone(),
            self.stop.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("pod-resources".into())
            .spawn(move || refresh_loop(socket, interval, latest, stop));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the pod-resources thread");
        }
        self.started = true;
    }
}

impl Drop for KubernetesSource {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Source for KubernetesSource {
    /// It writes each GPU's pods into the entries gpu found, by device id.
    fn after(&self) -> &'static [&'static str] {
        &["gpu"]
    }

    fn name(&self) -> &'static str {
        "kubernetes"
    }

    fn sample(&mut self, snapshot: &mut Snapshot, now: Duration) -> Result<(), SourceError> {
        let socket_dir_exists = self.socket.parent().is_some_and(Path::exists);
        if !self.started {
            if !socket_dir_exists {
                return Err(SourceError::Unsupported(format!(
                    "{} does not exist: not a Kubernetes node",
                    self.socket.display()
                )));
            }
            self.start();
        }
        let latest = self
            .latest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let Some(Answer {
            assignments,
            allocatable,
        }) = latest.answer
        else {
            return match latest.error {
                Some(error) => Err(SourceError::Failed(error)),
                // The first refresh has not finished yet.
                None => Ok(()),
            };
        };
        let mut live = BTreeSet::new();
        for gpu in snapshot.gpu.iter_mut().flat_map(|g| g.devices.iter_mut()) {
            let migs: Vec<String> = gpu.mig_devices.iter().map(|m| m.uuid.clone()).collect();
            let mut owners: Vec<PodRef> = assignments
                .iter()
                .filter(|a| device_matches(&a.device_id, &gpu.uuid, &migs))
                .map(|a| a.owner.clone())
                .collect();
            owners.sort();
            owners.dedup();
            gpu.allocatable = Some(
                allocatable
                    .iter()
                    .any(|id| device_matches(id, &gpu.uuid, &migs)),
            );
            let idle = gpu.up
                && (gpu.process_count == Some(0) || gpu.busy.is_some_and(|b| b.max_ratio <= 0.05));
            if !owners.is_empty() && idle {
                let since = *self.idle_since.entry(gpu.uuid.clone()).or_insert(now);
                gpu.allocated_idle_seconds = Some(now.saturating_sub(since).as_secs_f64());
                gpu.allocated_idle = now.saturating_sub(since) >= self.allocated_idle_after;
                live.insert(gpu.uuid.clone());
            }
            gpu.pods = owners;
        }
        self.idle_since.retain(|uuid, _| live.contains(uuid));
        match latest.error {
            // Serving the last good answer, but say the socket is failing.
            Some(error) => Err(SourceError::Failed(format!(
                "{error} (serving the last answer)"
            ))),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_ids_match_gpus_migs_and_replicas() {
        let migs = vec!["MIG-aaaa".to_string()];
        assert!(device_matches("GPU-1", "GPU-1", &[]));
        assert!(device_matches("GPU-1::3", "GPU-1", &[]));
        assert!(device_matches("MIG-aaaa", "GPU-1", &migs));
        assert!(!device_matches("GPU-2", "GPU-1", &migs));
        assert!(!device_matches("GPU-10", "GPU-1", &[]));
        assert!(!device_matches("", "", &[]));
    }

    #[test]
    fn a_list_answer_flattens_to_one_assignment_per_device() {
        let response = proto::ListPodResourcesResponse {
            pod_resources: vec![proto::PodResources {
                name: "train-0".into(),
                namespace: "ml".into(),
                containers: vec![proto::ContainerResources {
                    name: "trainer".into(),
                    devices: vec![proto::ContainerDevices {
                        resource_name: "nvidia.com/gpu".into(),
                        device_ids: vec!["GPU-1".into(), "GPU-2".into()],
                    }],
                }],
            }],
        };
        let found = assignments(&response);
        assert_eq!(found.len(), 2);
        assert_eq!(found[1].device_id, "GPU-2");
        assert_eq!(
            found[0].owner,
            PodRef {
                namespace: "ml".into(),
                pod: "train-0".into(),
                container: "trainer".into()
            }
        );
    }
}
