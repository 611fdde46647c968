//! Sources: each reads one area of the node and fills its part of the [`Snapshot`].
//!
//! A source keeps the previous counters it read (to derive rates) and nothing else; parsing
//! and rate arithmetic are pure functions in its module so they can be tested on strings.

pub mod cuda;
pub mod culprits;
pub mod demo;
pub mod environ;
pub mod gpu;
pub mod host;
#[cfg(feature = "kubernetes")]
pub mod kubernetes;
pub mod network;
pub mod process;
pub mod ras;
pub mod stacks;

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::snapshot::Snapshot;

/// Why a source produced no data on a tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceError {
    /// The host does not have this data at all (old kernel, feature compiled out).
    Unsupported(String),
    /// Reading or parsing failed.
    Failed(String),
}

impl SourceError {
    /// A failed read of `path`.
    pub fn io(path: &Path, error: &io::Error) -> SourceError {
        SourceError::Failed(format!("{}: {error}", path.display()))
    }
}

/// One area of the node that the sampler reads on every tick.
pub trait Source: Send {
    /// Short stable name, used as the `source` label.
    fn name(&self) -> &'static str;

    /// Reads the source and fills its part of `snapshot`. `now` is monotonic time since the
    /// sampler started; the source derives rates from the time between two of its reads.
    fn sample(&mut self, snapshot: &mut Snapshot, now: Duration) -> Result<(), SourceError>;

    /// The sources whose part of the snapshot this one reads (or writes into), by name: it
    /// must run after each of them that is enabled. [`out_of_order`] checks the contract.
    fn after(&self) -> &'static [&'static str] {
        &[]
    }
}

/// The first source that runs before one it reads, described; `None` when every source
/// runs after those it names in [`Source::after`].
pub fn out_of_order(sources: &[Box<dyn Source>]) -> Option<String> {
    sources.iter().enumerate().find_map(|(i, source)| {
        let later = source
            .after()
            .iter()
            .find(|name| sources[i + 1..].iter().any(|s| s.name() == **name))?;
        Some(format!(
            "{} runs before {later}, which it reads",
            source.name()
        ))
    })
}

/// Where the host's procfs and sysfs are mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoots {
    /// procfs root, normally `/proc`.
    pub procfs: PathBuf,
    /// sysfs root, normally `/sys`.
    pub sysfs: PathBuf,
}

impl HostRoots {
    /// Reads a file below the procfs root, mapping failures to a [`SourceError`].
    pub fn read_proc(&self, relative: &str) -> Result<String, SourceError> {
        let path = self.procfs.join(relative);
        let failed = |e: io::Error| SourceError::io(&path, &e);
        let bytes =
            read_from_start(&std::fs::File::open(&path).map_err(failed)?).map_err(failed)?;
        String::from_utf8(bytes)
            .map_err(|_| SourceError::Failed(format!("{}: not UTF-8", path.display())))
    }
}

/// The whole of an open /proc or /sys file, in `pread`s from its start: such a file reports
/// no size, so `read_to_string`'s size query and its small first reads (seven calls for a
/// 2 KiB `net/dev`) are system calls for nothing, at dozens of files a tick. A file that
/// cannot seek (a pipe standing in for one) is read through.
pub(crate) fn read_from_start(file: &std::fs::File) -> io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::FileExt;
    let mut bytes = vec![0; 4096];
    let mut length = 0;
    loop {
        length += match file.read_at(&mut bytes[length..], length as u64) {
            Err(e) if e.raw_os_error() == Some(libc::ESPIPE) => {
                bytes.truncate(length);
                (&*file).read_to_end(&mut bytes)?;
                return Ok(bytes);
            }
            read => read?,
        };
        if length < bytes.len() {
            bytes.truncate(length);
            return Ok(bytes);
        }
        bytes.resize(2 * bytes.len(), 0);
    }
}

/// Parses the text of a /proc file with procfs-core (docs/development.md says which files it
/// parses and why the others are parsed by hand).
pub fn parse_with_procfs<T: procfs_core::FromRead>(text: &str) -> Result<T, String> {
    T::from_read(text.as_bytes()).map_err(procfs_message)
}

/// [`parse_with_procfs`] for a file the kernel writes in ASCII (a process's io): the
/// library cuts the `:` off each key by byte and panics when the key ends in a wider
/// character, so anything else is refused first (the fuzz test found it).
pub fn parse_ascii_with_procfs<T: procfs_core::FromRead>(text: &str) -> Result<T, String> {
    if !text.is_ascii() {
        return Err("not ASCII".to_string());
    }
    parse_with_procfs(text)
}

/// What was wrong with a file procfs-core refused. The library words every malformed file as
/// "Internal error: bug at <its source path> (please report this procfs bug)"; the log says
/// what was wrong instead.
pub fn procfs_message(error: procfs_core::ProcError) -> String {
    match error {
        procfs_core::ProcError::InternalError(error) => {
            // Nested errors repeat the prefix; the innermost part says what was wrong.
            let what = error
                .msg
                .rsplit("Internal Unwrap Error: ")
                .next()
                .unwrap_or("");
            if what.ends_with("NoneError") {
                "a field is missing".to_string()
            } else if let Some(value) = what.strip_suffix(": Failed to convert") {
                format!("not a number: {value:?}")
            } else if let Some(quoted) = what
                .strip_prefix("Failed to parse ")
                .and_then(|rest| rest.get(rest.find(" (")? + 2..rest.find(") as a ")?))
            {
                format!("not a number: {quoted}")
            } else {
                what.to_string()
            }
        }
        other => other.to_string(),
    }
}

/// Increase of a counter between two reads, or `None` if it went backwards (a reset, a
/// re-attached device or a kernel that moved it back), so no negative rate is ever derived.
pub fn counter_delta(previous: f64, current: f64) -> Option<f64> {
    (current >= previous).then_some(current - previous)
}

/// The previous counters of a source and when they were read.
#[derive(Debug, Clone)]
pub struct Previous<T> {
    /// Monotonic time of the read.
    pub at: Duration,
    /// What was read.
    pub value: T,
}

/// Seconds between the previous read and `now`, if there was one and time moved forward.
pub fn elapsed_since<T>(previous: Option<&Previous<T>>, now: Duration) -> Option<(f64, &T)> {
    let previous = previous?;
    let seconds = now.checked_sub(previous.at)?.as_secs_f64();
    (seconds > 0.0).then_some((seconds, &previous.value))
}

/// The enabled sources, in the order the sampler runs them: the node's own figures first,
/// then gpu, then the sources that read the GPU processes gpu listed (each names them in
/// [`Source::after`]).
pub fn from_config(config: &crate::config::Config) -> Vec<Box<dyn Source>> {
    let roots = HostRoots {
        procfs: config.paths.procfs.clone(),
        sysfs: config.paths.sysfs.clone(),
    };
    let sources = &config.sources;
    let mut enabled: Vec<Box<dyn Source>> = Vec::new();
    if sources.cpu.enabled {
        enabled.push(Box::new(host::cpu::CpuSource::new(roots.clone())));
    }
    if sources.disk.enabled {
        enabled.push(Box::new(host::disk::DiskSource::new(
            roots.clone(),
            sources.disk.clone(),
        )));
    }
    if sources.pressure.enabled {
        enabled.push(Box::new(host::pressure::PressureSource::new(roots.clone())));
    }
    if sources.memory.enabled {
        enabled.push(Box::new(host::memory::MemorySource::new(roots.clone())));
    }
    if sources.infiniband.enabled {
        enabled.push(Box::new(network::InfinibandSource::new(&roots.sysfs)));
    }
    if sources.network_filesystems.enabled {
        enabled.push(Box::new(network::NetworkFilesystemsSource::new(
            roots.clone(),
            sources.network_filesystems.clone(),
        )));
    }
    if sources.gpu.enabled {
        enabled.push(Box::new(gpu::GpuSource::new(
            sources.gpu.clone(),
            roots.procfs.clone(),
        )));
    }
    if sources.network.enabled {
        enabled.push(Box::new(network::NetworkSource::new(
            roots.clone(),
            sources.network.clone(),
        )));
    }
    // The GPU process list is what it reads: nothing to do without it.
    if sources.process.enabled && sources.gpu.enabled {
        enabled.push(Box::new(process::ProcessSource::new(
            roots,
            sources.process.clone(),
        )));
    }
    // Before the stacks: a stack sample asks it whether its thread is inside a CUDA wait.
    let mut waits_now = None;
    if sources.cuda.enabled && sources.gpu.enabled {
        let probes = cuda::CudaSource::new(
            config.paths.procfs.clone(),
            &config.paths.sysfs,
            sources.cuda.launch_windows_every.0,
        );
        waits_now = probes.waits_now();
        enabled.push(Box::new(probes));
    }
    if sources.nccl_ras.enabled && sources.gpu.enabled {
        enabled.push(Box::new(ras::RasSource::new(config.paths.procfs.clone())));
    }
    if sources.stacks.enabled && sources.gpu.enabled {
        enabled.push(Box::new(stacks::StacksSource::new(
            config.paths.procfs.clone(),
            sources.stacks.clone(),
            waits_now,
        )));
    }
    if sources.culprits.enabled && sources.gpu.enabled {
        enabled.push(Box::new(culprits::CulpritsSource::new(
            config.paths.procfs.clone(),
            sources.culprits.clone(),
        )));
    }
    #[cfg(feature = "kubernetes")]
    if sources.kubernetes.enabled && sources.gpu.enabled {
        enabled.push(Box::new(kubernetes::KubernetesSource::new(
            sources.kubernetes.clone(),
        )));
    }
    debug_assert_eq!(out_of_order(&enabled), None);
    enabled
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_runs_after_the_sources_it_reads() {
        let mut config = crate::config::Config::default();
        config.sources.kubernetes.enabled = cfg!(feature = "kubernetes");
        let sources = from_config(&config);
        assert!(sources.len() >= 12, "every source is on by default");
        assert_eq!(out_of_order(&sources), None);
        let reversed: Vec<Box<dyn Source>> = from_config(&config).into_iter().rev().collect();
        let complaint = out_of_order(&reversed).expect("reversed is out of order");
        assert!(complaint.contains("runs before gpu"), "{complaint}");
    }

    #[test]
    fn counter_delta_never_goes_negative() {
        assert_eq!(counter_delta(5.0, 7.5), Some(2.5));
        assert_eq!(counter_delta(5.0, 5.0), Some(0.0));
        assert_eq!(counter_delta(7.0, 5.0), None);
    }

    #[test]
    fn elapsed_needs_a_previous_read_and_forward_time() {
        let previous = Previous {
            at: Duration::from_secs(2),
            value: 1,
        };
        assert_eq!(elapsed_since::<i32>(None, Duration::from_secs(3)), None);
        assert_eq!(
            elapsed_since(Some(&previous), Duration::from_secs(3)),
            Some((1.0, &1))
        );
        assert_eq!(elapsed_since(Some(&previous), Duration::from_secs(2)), None);
        assert_eq!(elapsed_since(Some(&previous), Duration::from_secs(1)), None);
    }
}
