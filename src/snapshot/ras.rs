//! What NCCL's RAS service (NCCL ≥ 2.24: a thread of each NCCL process, answering on
//! localhost:28028 in the job's network namespace) said of a GPU process's communicators.

/// One rank of a communicator that answered RAS's query.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RasRank {
    /// Its rank in the communicator.
    pub rank: u32,
    /// The node RAS knows it by (an address), and its process (`None`: RAS did not say).
    pub host: String,
    pub pid: Option<u32>,
    /// Its GPU's NVML index on that node (`None`: not said).
    pub nvml_dev: Option<i32>,
    /// Collectives it has launched, by NCCL's operation name (`AllReduce`, ...), as RAS
    /// counts them. Text answers list only the ranks whose counts stand out.
    pub collective_counts: Vec<(String, u64)>,
    /// What `ncclCommGetAsyncError` would return (0: none), and whether it was aborted.
    pub async_error: i32,
    pub aborted: bool,
}

impl RasRank {
    /// Operations launched of `op`, if RAS said.
    pub fn count(&self, op: &str) -> Option<u64> {
        self.collective_counts
            .iter()
            .find(|(name, _)| name == op)
            .map(|(_, count)| *count)
    }
}

/// A rank RAS could not get an answer from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RasMissingRank {
    pub rank: u32,
    pub host: String,
    pub pid: Option<u32>,
    pub nvml_dev: Option<i32>,
    /// Its process did not answer RAS (stopped, crashed, or its node lost)...
    pub unresponsive: bool,
    /// ...for 60 s or more: RAS considers it dead.
    pub dead: bool,
}

/// One communicator as RAS sees it across the job.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RasCommunicator {
    /// NCCL's communicator hash (`0x…`), as its debug output prints it.
    pub hash: String,
    /// Ranks in the communicator.
    pub size: u32,
    /// The ranks that answered (JSON: all; text: the ones that stand out).
    pub ranks: Vec<RasRank>,
    /// The ranks that did not.
    pub missing: Vec<RasMissingRank>,
}

/// How the RAS service answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RasFormat {
    /// JSON (NCCL ≥ 2.28.7): every rank's counts and status.
    Json,
    /// Text only (NCCL 2.24 – 2.28.6): the missing ranks and the ranks whose counts stand out.
    Text,
}

/// A RAS answer for the communicators of one GPU process.
#[derive(Debug, Clone, PartialEq)]
pub struct RasReport {
    /// NCCL's version as RAS states it (empty where the answer does not).
    pub nccl_version: String,
    pub format: RasFormat,
    pub communicators: Vec<RasCommunicator>,
    /// Seconds RAS took to gather the data, and the peers it timed out on meanwhile.
    pub collection_seconds: f64,
    pub timeouts: u32,
}

/// The last RAS query of one GPU process.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessRas {
    pub pid: u32,
    /// The answer, or why there is none (nothing listens: RAS off or NCCL before 2.24; the
    /// exporter may not enter the process's network namespace; the service timed out).
    pub answer: Result<RasReport, String>,
}
