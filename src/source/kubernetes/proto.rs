//! The messages of the kubelet's pod-resources API v1 (k8s.io/kubelet/pkg/apis/podresources/v1)
//! that the exporter uses, declared with prost so no protoc is needed. Field numbers follow
//! api.proto; fields the exporter does not read are left out (protobuf skips unknown fields).

/// `List` request: empty.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesRequest {}

/// `List` response: every pod with devices or CPUs assigned.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesResponse {
    /// One entry per pod.
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

/// A pod and its containers' resources.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResources {
    /// Pod name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Pod namespace.
    #[prost(string, tag = "2")]
    pub namespace: String,
    /// Containers with assigned resources.
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

/// A container's assigned devices.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerResources {
    /// Container name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Devices by resource.
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
}

/// Devices of one extended resource.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerDevices {
    /// Resource name, e.g. `nvidia.com/gpu` or `nvidia.com/mig-1g.10gb`.
    #[prost(string, tag = "1")]
    pub resource_name: String,
    /// Device ids as the device plugin reported them: GPU UUIDs, MIG UUIDs, or `<uuid>::<n>`
    /// replicas under time-slicing.
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
}

/// `GetAllocatableResources` request: empty.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AllocatableResourcesRequest {}

/// `GetAllocatableResources` response: every device the kubelet can hand out.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AllocatableResourcesResponse {
    /// Devices by resource.
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<ContainerDevices>,
}

/// gRPC method paths.
pub const LIST: &str = "/v1.PodResourcesLister/List";
/// gRPC method path of GetAllocatableResources.
pub const GET_ALLOCATABLE: &str = "/v1.PodResourcesLister/GetAllocatableResources";
