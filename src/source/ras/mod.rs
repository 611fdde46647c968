//! NCCL's RAS service, asked about a GPU process's communicators while the analysis tracks a
//! hang on its GPU (`Snapshot::ras_wanted`): which ranks answer, which do not, and how many
//! collectives each has launched. Every NCCL process since 2.24 runs a RAS thread listening on
//! localhost:28028 (`NCCL_RAS_ADDR`) in its own network namespace; the exporter enters that
//! namespace on a thread of its own (`setns`, which needs CAP_SYS_ADMIN unless the job shares
//! the exporter's namespace) and speaks RAS's text protocol there. A query makes RAS gather
//! from every process of the job (seconds when one does not answer), so it runs off the
//! sampler thread, at most one per process at a time and one every [`REQUERY_S`].

mod client;
mod parse;

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::Duration;

use super::{Source, SourceError};
use crate::snapshot::{ProcessRas, RasReport, Snapshot};

/// Seconds between two queries of one process while it stays wanted.
pub const REQUERY_S: f64 = 15.0;

/// Why a query has no answer.
#[derive(Debug)]
struct Refusal {
    why: String,
    /// The exporter lacks a privilege for it (the source is then unsupported, not failing).
    unprivileged: bool,
}

impl From<String> for Refusal {
    fn from(why: String) -> Self {
        Refusal {
            why,
            unprivileged: false,
        }
    }
}

type Answer = Result<parse::Parsed, Refusal>;

/// One wanted process: when it was last asked, and its last answer (`None` until the first).
struct Asked {
    at: f64,
    answer: Option<(ProcessRas, bool)>,
}

pub struct RasSource {
    procfs: PathBuf,
    /// Each wanted process's queries.
    asked: HashMap<u32, Asked>,
    /// Queries under way, by pid.
    pending: HashMap<u32, Receiver<Answer>>,
}

impl RasSource {
    pub fn new(procfs: PathBuf) -> Self {
        RasSource {
            procfs,
            asked: HashMap::new(),
            pending: HashMap::new(),
        }
    }
}

impl Source for RasSource {
    fn name(&self) -> &'static str {
        "nccl_ras"
    }

    fn sample(&mut self, snapshot: &mut Snapshot, now: Duration) -> Result<(), SourceError> {
        let now = now.as_secs_f64();
        let wanted = &snapshot.ras_wanted;
        // A process no longer wanted (its hang ended, or it exited) is forgotten; a query
        // under way finishes on its own thread and is dropped.
        self.asked.retain(|pid, _| wanted.contains(pid));
        self.pending.retain(|pid, receiver| {
            let answer = match receiver.try_recv() {
                Ok(answer) => answer,
                Err(TryRecvError::Empty) => return wanted.contains(pid),
                Err(TryRecvError::Disconnected) => {
                    Err(Refusal::from("the RAS query's thread ended".to_string()))
                }
            };
            let unprivileged = answer.as_ref().is_err_and(|r| r.unprivileged);
            let answer = match answer {
                Ok(parsed) => Ok(RasReport {
                    nccl_version: parsed.nccl_version,
                    format: parsed.format,
                    communicators: parsed.communicators,
                    collection_seconds: parsed.collection_seconds,
                    timeouts: parsed.timeouts,
                }),
                Err(refusal) => Err(refusal.why),
            };
            if let Some(asked) = self.asked.get_mut(pid) {
                asked.answer = Some((ProcessRas { pid: *pid, answer }, unprivileged));
            }
            false
        });
        for &pid in wanted {
            let due = self
                .asked
                .get(&pid)
                .is_none_or(|asked| now - asked.at >= REQUERY_S);
            if due && !self.pending.contains_key(&pid) {
                self.pending.insert(pid, ask(&self.procfs, pid));
                // The previous answer stands until the new one comes.
                let answer = self.asked.remove(&pid).and_then(|a| a.answer);
                self.asked.insert(pid, Asked { at: now, answer });
            }
        }
        let mut answers: Vec<&(ProcessRas, bool)> = self
            .asked
            .values()
            .filter_map(|a| a.answer.as_ref())
            .collect();
        answers.sort_by_key(|(r, _)| r.pid);
        let refused = answers
            .iter()
            .all(|(_, unprivileged)| *unprivileged)
            .then(|| answers.first())
            .flatten()
            .and_then(|(r, _)| r.answer.clone().err());
        snapshot.ras = answers.into_iter().map(|(r, _)| r.clone()).collect();
        match refused {
            Some(why) => Err(SourceError::Unsupported(why)),
            None => Ok(()),
        }
    }
}

/// Starts a query of `pid`'s RAS service on a thread of its own, which enters the process's
/// network namespace first where it differs from the exporter's.
fn ask(procfs: &Path, pid: u32) -> Receiver<Answer> {
    let (send, receive) = mpsc::channel();
    let procfs = procfs.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("nccl-ras".into())
        .spawn(move || {
            let answer = enter_network_of(&procfs, pid).and_then(|()| {
                let environment = environment(&procfs, pid);
                let address = client::address(&environment)?;
                Ok(client::status(address)?)
            });
            let _ = send.send(answer);
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start a RAS query thread");
    }
    receive
}

/// Moves the calling thread into `pid`'s network namespace (nothing to do when it is the
/// exporter's own).
fn enter_network_of(procfs: &Path, pid: u32) -> Result<(), Refusal> {
    let path = procfs.join(format!("{pid}/ns/net"));
    let theirs = std::fs::File::open(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Refusal::from(format!("process {pid} exited")),
        _ => Refusal {
            why: format!(
                "reading process {pid}'s network namespace needs ptrace access (CAP_SYS_PTRACE): {e}"
            ),
            unprivileged: true,
        },
    })?;
    let same = |ours: std::fs::Metadata, theirs: std::fs::Metadata| {
        ours.ino() == theirs.ino() && ours.dev() == theirs.dev()
    };
    let ours = std::fs::metadata("/proc/thread-self/ns/net").map_err(|e| e.to_string())?;
    if same(ours, theirs.metadata().map_err(|e| e.to_string())?) {
        return Ok(());
    }
    // SAFETY: setns on a descriptor of a namespace file; it affects this thread only, which
    // exists for this query and ends after it.
    if unsafe { libc::setns(theirs.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EPERM) => Refusal {
                why: format!(
                    "entering process {pid}'s network namespace, where its RAS service listens, needs CAP_SYS_ADMIN"
                ),
                unprivileged: true,
            },
            _ => Refusal::from(format!("entering process {pid}'s network namespace: {e}")),
        });
    }
    Ok(())
}

/// The process's environment (`NCCL_RAS_ADDR`, `NCCL_RAS_ENABLE`); empty where unreadable,
/// which leaves NCCL's defaults.
fn environment(procfs: &Path, pid: u32) -> Vec<u8> {
    std::fs::read(procfs.join(format!("{pid}/environ"))).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process in a network namespace of its own (`unshare -n`), as a job's pod has.
    struct Isolated(std::process::Child);

    impl Drop for Isolated {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn isolated() -> Option<Isolated> {
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        let child = std::process::Command::new("unshare")
            .args(["-n", "sleep", "30"])
            .spawn()
            .ok()?;
        // unshare execs sleep in the same process once the namespace is made.
        let ours = std::fs::read_link("/proc/self/ns/net").ok()?;
        for _ in 0..200 {
            let theirs = std::fs::read_link(format!("/proc/{}/ns/net", child.id())).ok();
            if theirs.is_some_and(|t| t != ours) {
                return Some(Isolated(child));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// Runs `f` on a thread of its own after `restrict` changed that thread's credentials
    /// (capabilities and uids are per thread to the kernel).
    fn on_a_thread(
        restrict: fn(),
        f: impl FnOnce() -> Result<(), String> + Send,
    ) -> Result<(), String> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    restrict();
                    f()
                })
                .join()
                .unwrap()
        })
    }

    fn drop_sys_admin() {
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Default, Clone, Copy)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let mut header = Header {
            version: 0x2008_0522,
            pid: 0,
        };
        let mut data = [Data::default(); 2];
        // SAFETY: capget / capset of this thread with the version-3 layout (two data words).
        unsafe {
            assert_eq!(
                libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()),
                0
            );
            data[0].effective &= !(1 << 21); // CAP_SYS_ADMIN
            assert_eq!(libc::syscall(libc::SYS_capset, &header, data.as_ptr()), 0);
        }
    }

    fn become_nobody() {
        // SAFETY: the raw system call changes this thread's uids only (glibc's setresuid
        // would change every thread's).
        unsafe { assert_eq!(libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534), 0) };
    }

    #[test]
    fn entering_a_jobs_network_namespace_needs_cap_sys_admin_and_ptrace_access() {
        let Some(job) = isolated() else {
            eprintln!("skipped: needs root and unshare(1) to make a network namespace");
            return;
        };
        let pid = job.0.id();
        let procfs = Path::new("/proc");
        // As deployed with the capability: the thread enters, and its loopback is the job's.
        assert_eq!(
            on_a_thread(|| {}, || enter_network_of(procfs, pid).map_err(|r| r.why)),
            Ok(())
        );
        let without = on_a_thread(drop_sys_admin, || {
            enter_network_of(procfs, pid).map_err(|r| r.why)
        })
        .unwrap_err();
        assert!(without.contains("needs CAP_SYS_ADMIN"), "{without}");
        let nobody = on_a_thread(become_nobody, || {
            enter_network_of(procfs, pid).map_err(|r| r.why)
        })
        .unwrap_err();
        assert!(nobody.contains("needs ptrace access"), "{nobody}");
        // The exporter's own namespace needs nothing.
        let own = std::process::id();
        assert_eq!(
            on_a_thread(drop_sys_admin, || enter_network_of(procfs, own)
                .map_err(|r| r.why)),
            Ok(())
        );
        drop(job);
        let gone = enter_network_of(procfs, pid).unwrap_err().why;
        assert!(gone.contains("exited"), "{gone}");
    }

    /// Samples until the query of `pid` has an answer; returns the source's outcome then.
    fn sample_until_answered(
        source: &mut RasSource,
        pid: u32,
    ) -> (Result<(), SourceError>, String) {
        for tick in 1..200 {
            let mut snapshot = Snapshot {
                ras_wanted: vec![pid],
                ..Snapshot::default()
            };
            let outcome = source.sample(&mut snapshot, Duration::from_millis(100 * tick));
            // Nothing until the first answer comes.
            let answer = snapshot.ras.into_iter().find(|r| r.pid == pid);
            match answer.map(|r| r.answer) {
                None => {}
                Some(Err(why)) => return (outcome, why),
                Some(Ok(report)) => return (outcome, format!("{report:?}")),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("no answer");
    }

    #[test]
    fn a_source_whose_every_query_lacks_privilege_is_unsupported() {
        let mut source = RasSource::new(PathBuf::from("/proc"));
        let mut snapshot = Snapshot::default();
        // Nothing wanted: nothing asked.
        assert_eq!(source.sample(&mut snapshot, Duration::from_secs(1)), Ok(()));
        assert!(snapshot.ras.is_empty());
        let Some(job) = isolated() else {
            eprintln!("skipped: needs root and unshare(1) to make a network namespace");
            return;
        };
        let pid = job.0.id();
        // Without CAP_SYS_ADMIN (its query threads inherit the sampler's credentials).
        let (outcome, why) = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    drop_sys_admin();
                    sample_until_answered(&mut RasSource::new(PathBuf::from("/proc")), pid)
                })
                .join()
                .unwrap()
        });
        assert!(why.contains("needs CAP_SYS_ADMIN"), "{why}");
        assert!(
            matches!(&outcome, Err(SourceError::Unsupported(w)) if *w == why),
            "{outcome:?}"
        );
        // With it, inside the job's namespace: nothing listens there (its loopback is even
        // down), which is the job's state, not the source failing.
        let (outcome, why) = sample_until_answered(&mut source, pid);
        assert!(why.contains("127.0.0.1:28028"), "{why}");
        assert_eq!(outcome, Ok(()));
        // No longer wanted: forgotten.
        let mut snapshot = Snapshot::default();
        assert_eq!(
            source.sample(&mut snapshot, Duration::from_secs(60)),
            Ok(())
        );
        assert!(snapshot.ras.is_empty());
    }
}
