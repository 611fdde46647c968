//! The entry points the source probes, and what each one counts: the CUDA driver's, and
//! NCCL's collectives (libnccl.so*, which PyTorch maps beside the driver).

use super::cadence::{Role, Waiting};
use crate::snapshot::{Collective, CudaWait};

/// What a probed entry point counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    Launch,
    GraphLaunch,
    ToDevice,
    ToHost,
    /// An NCCL operation: its element count and datatype (a collective's third and fourth
    /// arguments, a send's or receive's second and third).
    Collective(Collective),
}

/// One entry point of the driver or NCCL: counted on entry, timed as a wait, or both (a
/// copy); or, for NCCL's communicator creation, timed apart from the driver's waits.
pub struct Probe {
    pub symbol: &'static str,
    pub counted: Option<Counted>,
    pub wait: Option<CudaWait>,
    /// Creates an NCCL communicator: returns once every rank of it has called it (NCCL's
    /// bootstrap), the host asleep meanwhile and the GPU untouched. Timed in a map of its own
    /// (`Maps::communicator_starts`): a stack sample there is no GPU sync.
    pub creates_communicator: bool,
}

const fn probe(symbol: &'static str, counted: Option<Counted>, wait: Option<CudaWait>) -> Probe {
    Probe {
        symbol,
        counted,
        wait,
        creates_communicator: false,
    }
}

/// An NCCL call that creates a communicator, a collective call over its ranks (nccl.h:
/// `ncclCommInitRank*` over the ranks of a unique id, `ncclCommSplit` over the parent's).
const fn communicator(symbol: &'static str) -> Probe {
    Probe {
        symbol,
        counted: None,
        wait: None,
        creates_communicator: true,
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
    collective("ncclAllReduce", Collective::AllReduce),
    collective("ncclReduceScatter", Collective::ReduceScatter),
    collective("ncclAllGather", Collective::AllGather),
    collective("ncclBroadcast", Collective::Broadcast),
    collective("ncclReduce", Collective::Reduce),
    collective("ncclSend", Collective::Send),
    collective("ncclRecv", Collective::Recv),
    communicator("ncclCommInitRank"),
    communicator("ncclCommInitRankConfig"),
    communicator("ncclCommInitRankScalable"),
    communicator("ncclCommSplit"),
];

/// An NCCL collective whose third argument is its element count and fourth its datatype
/// (`ncclAllReduce(send, recv, count, datatype, ...)`; the reduce-scatter's count is per rank,
/// the all-gather's is what each rank sends), or a send or receive, whose second and third are
/// (`ncclSend(buffer, count, datatype, peer, ...)`). Only the `nccl*` names: `pnccl*` are the
/// same code under a second name, and probing both would count each call twice.
const fn collective(symbol: &'static str, op: Collective) -> Probe {
    probe(symbol, Some(Counted::Collective(op)), None)
}

/// Bytes of one element of NCCL's `ncclDataType_t` (nccl.h); None for a value it has not.
pub fn element_bytes(datatype: u32) -> Option<u64> {
    Some(match datatype {
        0 | 1 | 10 | 11 => 1,
        6 | 9 => 2,
        2 | 3 | 7 => 4,
        4 | 5 | 8 => 8,
        _ => return None,
    })
}

/// Set in a mark's probe number where it marks the wait's return, not the call.
pub const RETURN_MARK: u32 = 1 << 16;

/// What a marked call of probe `probe` (a mark's number) means for the GPU's queue.
pub fn role(probe: u32) -> Role {
    if probe & RETURN_MARK != 0 {
        return Role::Returned;
    }
    match PROBES.get(probe as usize) {
        Some(p) if p.wait.is_some() => Role::Wait(match p.counted {
            Some(Counted::ToDevice) => Waiting::Upload,
            Some(Counted::ToHost) => Waiting::Download,
            _ => Waiting::Sync,
        }),
        Some(p)
            if matches!(
                p.counted,
                Some(Counted::GraphLaunch | Counted::Collective(_))
            ) =>
        {
            Role::Work
        }
        _ => Role::Other,
    }
}

/// Whether probe `probe` (a mark's number) is one side of an NCCL point-to-point transfer
/// (`ncclSend`, `ncclRecv`).
pub fn is_transfer(probe: u32) -> bool {
    matches!(
        PROBES.get(probe as usize).and_then(|p| p.counted),
        Some(Counted::Collective(op)) if op.is_point_to_point()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn number(symbol: &str) -> u32 {
        PROBES.iter().position(|p| p.symbol == symbol).unwrap() as u32
    }

    #[test]
    fn each_marked_call_has_its_role_for_the_queue() {
        let upload = number("cuMemcpyHtoDAsync_v2");
        assert_eq!(role(upload), Role::Wait(Waiting::Upload));
        assert_eq!(
            role(number("cuMemcpyDtoH_v2")),
            Role::Wait(Waiting::Download)
        );
        assert_eq!(
            role(number("cuStreamSynchronize")),
            Role::Wait(Waiting::Sync)
        );
        assert_eq!(role(number("ncclAllReduce")), Role::Work);
        assert_eq!(role(number("cuGraphLaunch")), Role::Work);
        assert_eq!(role(number("cuLaunchKernel")), Role::Other);
        assert_eq!(role(upload | RETURN_MARK), Role::Returned);
        assert_eq!(role(999), Role::Other);
    }

    #[test]
    fn sends_and_receives_are_transfers_and_nothing_else_is() {
        assert!(is_transfer(number("ncclSend")));
        assert!(is_transfer(number("ncclRecv")));
        assert!(!is_transfer(number("ncclAllReduce")));
        assert!(!is_transfer(number("cuStreamSynchronize")));
        assert!(!is_transfer(number("ncclRecv") | RETURN_MARK));
    }
}
