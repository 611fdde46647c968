//! The driver's entry points the source probes, and what each one counts.

use crate::snapshot::CudaWait;

/// What a probed entry point counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    Launch,
    GraphLaunch,
    ToDevice,
    ToHost,
}

/// One entry point of the driver: counted on entry, timed as a wait, or both (a copy).
pub struct Probe {
    pub symbol: &'static str,
    pub counted: Option<Counted>,
    pub wait: Option<CudaWait>,
}

const fn probe(symbol: &'static str, counted: Option<Counted>, wait: Option<CudaWait>) -> Probe {
    Probe {
        symbol,
        counted,
        wait,
    }
}

/// The entry points, by probe number. `_ptsz` / `_ptds` are the per-thread-default-stream
/// forms a runtime built with `--default-stream per-thread` calls.
pub const PROBES: &[Probe] = &[
    probe("cuLaunchKernel", Some(Counted::Launch), None),
    probe("cuLaunchKernel_ptsz", Some(Counted::Launch), None),
    probe("cuLaunchKernelEx", Some(Counted::Launch), None),
    probe("cuLaunchKernelEx_ptsz", Some(Counted::Launch), None),
    probe("cuGraphLaunch", Some(Counted::GraphLaunch), None),
    probe("cuGraphLaunch_ptsz", Some(Counted::GraphLaunch), None),
    probe(
        "cuMemcpyHtoD_v2",
        Some(Counted::ToDevice),
        Some(CudaWait::Copy),
    ),
    probe(
        "cuMemcpyHtoD_v2_ptds",
        Some(Counted::ToDevice),
        Some(CudaWait::Copy),
    ),
    probe(
        "cuMemcpyHtoDAsync_v2",
        Some(Counted::ToDevice),
        Some(CudaWait::Copy),
    ),
    probe(
        "cuMemcpyHtoDAsync_v2_ptsz",
        Some(Counted::ToDevice),
        Some(CudaWait::Copy),
    ),
    probe(
        "cuMemcpyDtoH_v2",
        Some(Counted::ToHost),
        Some(CudaWait::Copy),
    ),
    probe(
        "cuMemcpyDtoH_v2_ptds",
        Some(Counted::ToHost),
        Some(CudaWait::Copy),
    ),
    probe(
        "cuMemcpyDtoHAsync_v2",
        Some(Counted::ToHost),
        Some(CudaWait::Copy),
    ),
    probe(
        "cuMemcpyDtoHAsync_v2_ptsz",
        Some(Counted::ToHost),
        Some(CudaWait::Copy),
    ),
    probe("cuStreamSynchronize", None, Some(CudaWait::Stream)),
    probe("cuStreamSynchronize_ptsz", None, Some(CudaWait::Stream)),
    probe("cuCtxSynchronize", None, Some(CudaWait::Device)),
    probe("cuEventSynchronize", None, Some(CudaWait::Event)),
];
