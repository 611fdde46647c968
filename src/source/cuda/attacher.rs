//! Attaching and detaching the probes, off the sampler's thread. Detaching a BPF program waits
//! out an RCU tasks-trace grace period (twice per probe: the program's and the uprobe's), and
//! an attach made meanwhile waits behind it. On a loaded node those grace periods run to
//! seconds; on this project's 2-CPU VM, stalled under two ranks spinning on its CPUs, to a
//! minute (2026-12-07: an attach waited 28 s behind a detach). Done on the tick, that held up
//! every source, the GPUs read "not answering" and /metrics went stale. A thread of its own
//! does both, in order, and the tick takes what is done.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use super::bpf::{self, Attached, Program, UprobePmu};
use super::elf;
use super::maps::Maps;
use super::probes::{Counted, PROBES, RETURN_MARK};
use super::programs::{self, Measured};
use super::windows::Windowed;
use crate::snapshot::Collective;

/// A probed file: its device and inode.
pub type LibraryKey = (String, u64);

/// A kernel launch that took this long waited for room in the launch queue: an unqueued
/// launch returns in microseconds (a few on bare metal, with the probes' traps some 30 on
/// this project's VM), a full queue holds it until a kernel ends.
const QUEUE_WAIT_MIN_NS: i32 = 100_000;

/// The probes on one driver file; dropping it detaches them.
pub struct Library {
    _attached: Vec<Attached>,
    pub launches: Vec<Arc<Windowed>>,
}

/// Attaches every probe the driver at `path` has: waits, copies and graph launches for good,
/// kernel launches left to the [`LaunchWindows`] thread.
fn attach(pmu: UprobePmu, maps: &Maps, path: &Path) -> io::Result<Library> {
    let bytes = std::fs::read(path)?;
    let symbols: Vec<&str> = PROBES.iter().map(|p| p.symbol).collect();
    let offsets = elf::offsets(&bytes, &symbols).map_err(io::Error::other)?;
    let mut attached = Vec::new();
    let mut launches = Vec::new();
    let load = |code: Vec<bpf::Insn>| Program::load(&code).map(Arc::new);
    for (number, (probe, offset)) in PROBES.iter().zip(offsets).enumerate() {
        let Some(offset) = offset else { continue };
        let number = number as u32;
        match probe.counted {
            Some(Counted::Launch) => launches.push(Arc::new(Windowed {
                path: path.to_path_buf(),
                offset,
                count: load(programs::count(
                    maps.counts.fd(),
                    number,
                    Measured::Nothing,
                    Some(maps.window_open.fd()),
                ))?,
                timing: [
                    load(programs::wait_entry(
                        maps.launch_starts.fd(),
                        number,
                        true,
                        Some(maps.window_open.fd()),
                    ))?,
                    load(programs::wait_exit(
                        maps.launch_starts.fd(),
                        maps.waits.fd(),
                        number,
                        QUEUE_WAIT_MIN_NS,
                        Some((maps.held_first.fd(), maps.held_last.fd())),
                    ))?,
                ],
            })),
            Some(counted) => {
                let measured = match counted {
                    Counted::ToDevice | Counted::ToHost => Measured::Third,
                    Counted::Collective(Collective::Send | Collective::Recv) => {
                        Measured::SecondByThird
                    }
                    Counted::Collective(_) => Measured::ThirdByFourth,
                    _ => Measured::Nothing,
                };
                let program = load(programs::count(maps.counts.fd(), number, measured, None))?;
                attached.push(Attached::new(pmu, path, offset, false, program)?);
            }
            None => {}
        }
        if probe.creates_communicator {
            let starts = maps.communicator_starts.fd();
            let entry = load(programs::wait_entry(starts, number, false, None))?;
            attached.push(Attached::new(pmu, path, offset, false, entry)?);
            let exit = load(programs::wait_exit(
                starts,
                maps.waits.fd(),
                number,
                0,
                None,
            ))?;
            attached.push(Attached::new(pmu, path, offset, true, exit)?);
            continue;
        }
        // Every call but a kernel launch marks the loop's cadence (where the ring is).
        if let Some(ring) = maps
            .marks
            .as_ref()
            .filter(|_| probe.counted != Some(Counted::Launch))
        {
            let send = probe.counted == Some(Counted::Collective(Collective::Send));
            let mark = load(programs::mark(ring.fd(), number, send))?;
            attached.push(Attached::new(pmu, path, offset, false, mark)?);
        }
        if probe.wait.is_some() {
            let entry = load(programs::wait_entry(maps.starts.fd(), number, false, None))?;
            attached.push(Attached::new(pmu, path, offset, false, entry)?);
            let exit = load(programs::wait_exit(
                maps.starts.fd(),
                maps.waits.fd(),
                number,
                0,
                None,
            ))?;
            attached.push(Attached::new(pmu, path, offset, true, exit)?);
            // Its return marks too (when the queue drained: backlog.rs), on the same trap.
            if let Some(ring) = maps.marks.as_ref() {
                let mark = load(programs::mark(ring.fd(), number | RETURN_MARK, false))?;
                attached.push(Attached::new(pmu, path, offset, true, mark)?);
            }
        }
    }
    if attached.is_empty() && launches.is_empty() {
        return Err(io::Error::other(
            "none of the probed entry points is exported",
        ));
    }
    Ok(Library {
        _attached: attached,
        launches,
    })
}

/// Why the probes cannot run, worded for the log.
pub fn refusal(error: &io::Error) -> String {
    if error.kind() == io::ErrorKind::PermissionDenied {
        "BPF or perf_event refused: the probes need CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN); \
         as shipped, the Helm value `cudaProbes` and deploy/kubernetes grant them"
            .to_string()
    } else {
        format!("uprobes unavailable: {error}")
    }
}

/// What the attaching thread is asked to do.
enum Job {
    /// Attach the file at `path` (through the process's root), mapped by `pid` as `shown`.
    Attach {
        key: LibraryKey,
        path: PathBuf,
        pid: u32,
        shown: String,
    },
    /// Let go of these probes.
    Detach(Vec<Result<Library, String>>),
}

/// The attaching thread, and the files it has been asked for and not answered yet.
pub struct Attacher {
    jobs: Sender<Job>,
    done: Receiver<(LibraryKey, Result<Library, String>)>,
    pending: HashSet<LibraryKey>,
}

impl Attacher {
    /// Starts the thread; it ends when the attacher is dropped (after its last job).
    pub fn start(pmu: UprobePmu, maps: Arc<Maps>) -> io::Result<Attacher> {
        let (jobs, inbox) = channel::<Job>();
        let (outbox, done) = channel();
        std::thread::Builder::new()
            .name("cuda-attach".into())
            .spawn(move || {
                for job in inbox {
                    match job {
                        Job::Attach {
                            key,
                            path,
                            pid,
                            shown,
                        } => {
                            let probes = attach(pmu, &maps, &path).map_err(|e| refusal(&e));
                            match &probes {
                                Ok(_) => {
                                    tracing::info!(pid, library = %shown, "cuda probes attached")
                                }
                                Err(why) => {
                                    tracing::warn!(pid, library = %shown, "cuda probes: {why}")
                                }
                            }
                            if outbox.send((key, probes)).is_err() {
                                return;
                            }
                        }
                        Job::Detach(gone) => drop(gone),
                    }
                }
            })?;
        Ok(Attacher {
            jobs,
            done,
            pending: HashSet::new(),
        })
    }

    /// Asks for `key` to be attached, once until it is answered.
    pub fn request(&mut self, key: &LibraryKey, path: PathBuf, pid: u32, shown: &str) {
        if self.pending.insert(key.clone()) {
            let _ = self.jobs.send(Job::Attach {
                key: key.clone(),
                path,
                pid,
                shown: shown.to_string(),
            });
        }
    }

    /// Lets go of probes (after any attach asked for before).
    pub fn detach(&self, gone: Vec<Result<Library, String>>) {
        if !gone.is_empty() {
            let _ = self.jobs.send(Job::Detach(gone));
        }
    }

    /// The files attached, or refused, since the last call.
    pub fn answered(&mut self) -> Vec<(LibraryKey, Result<Library, String>)> {
        let answers: Vec<_> = self.done.try_iter().collect();
        for (key, _) in &answers {
            self.pending.remove(key);
        }
        answers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real maps and PMU where this host lets the test make them (root with BPF and
    /// uprobes, as the test command runs); `None` elsewhere.
    fn setup() -> Option<(UprobePmu, Arc<Maps>)> {
        let pmu = UprobePmu::find(Path::new("/sys")).ok()?;
        Some((pmu, Arc::new(Maps::create().ok()?)))
    }

    #[test]
    fn a_file_is_asked_for_once_until_answered_and_answers_come_off_the_tick() {
        let Some((pmu, maps)) = setup() else {
            eprintln!("skipped: no BPF or uprobe PMU here");
            return;
        };
        let mut attacher = Attacher::start(pmu, maps).unwrap();
        let key: LibraryKey = ("0:0".into(), 1);
        let missing = PathBuf::from("/nonexistent/libcuda.so.1");
        // Asked twice before any answer: attached (here, refused) once.
        attacher.request(&key, missing.clone(), 1, "/usr/lib/libcuda.so.1");
        attacher.request(&key, missing.clone(), 1, "/usr/lib/libcuda.so.1");
        let mut answers = Vec::new();
        // Until the first answer, and a while longer for a second that must not come.
        let mut after_first = 0;
        for _ in 0..1000 {
            answers.extend(attacher.answered());
            after_first += usize::from(!answers.is_empty());
            if after_first == 20 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(answers.len(), 1);
        let (answered, probes) = answers.pop().unwrap();
        assert_eq!(answered, key);
        let why = probes.err().unwrap();
        assert!(why.contains("No such file"), "{why}");
        // Once answered, it may be asked for again (a file that reappears).
        attacher.request(&key, missing, 1, "/usr/lib/libcuda.so.1");
        let mut again = Vec::new();
        for _ in 0..500 {
            again.extend(attacher.answered());
            if !again.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(again.len(), 1);
    }
}
