//! Telling a GPU process's data-loader workers from its other descendants. Pure.
//!
//! A training rank's children are not all loaders: wandb-core, the torch.compile (inductor)
//! compile sidecar and its pool, multiprocessing's forkserver and resource_tracker, an async
//! checkpoint writer. Counted as workers, a handful of idle sidecars makes a loader whose one
//! worker decodes flat out look like workers that mostly sleep. So:
//!
//! - PyTorch's DataLoader names its worker processes `pt_data_worker` (their comm). Where any
//!   descendant carries that name, the loaders are exactly those and what they start (a
//!   decoder subprocess); everything else is another child.
//! - Where none does (an older PyTorch, another loader), the loaders are the descendants
//!   running the rank's own executable (workers are forks or `sys.executable` spawns), less
//!   Python's and PyTorch's known helpers and what they start. A forkserver is no loader
//!   itself, but the workers it forks are.

/// What discovery read of one descendant of a GPU process.
#[derive(Debug, Clone, PartialEq)]
pub struct Descendant {
    /// Process id.
    pub pid: u32,
    /// Its parent's.
    pub ppid: u32,
    /// Command name (`comm`).
    pub comm: String,
    /// The executable it runs (`/proc/<pid>/exe`), where readable and needed (not where a
    /// descendant carries the DataLoader's worker name).
    pub exe: Option<String>,
    /// Its command line, arguments joined by spaces (empty where not needed, as `exe`).
    pub cmdline: String,
}

/// The comm PyTorch's DataLoader gives its worker processes.
pub const LOADER_WORKER_NAME: &str = "pt_data_worker";

/// Command-line parts of helpers that are not loaders, nor is anything they start.
const HELPERS: [&str; 4] = [
    "multiprocessing.resource_tracker",
    "torch._inductor.compile_worker",
    "_inductor/compile_worker",
    "wandb",
];

/// Python's forkserver: not a loader, but the workers of a forkserver-started loader are its
/// children.
const FORKSERVER: &str = "multiprocessing.forkserver";

#[derive(Clone, Copy, PartialEq)]
enum Role {
    Loader,
    Other,
    /// Not a loader; its children are judged on their own.
    Forkserver,
}

/// The loader workers among `found` (a parent listed before its children), in their order.
/// `rank_exe` is the GPU process's executable, where readable.
pub fn loader_workers(rank_exe: Option<&str>, found: &[Descendant]) -> Vec<u32> {
    let named = found.iter().any(|d| d.comm == LOADER_WORKER_NAME);
    let mut roles: Vec<(u32, Role)> = Vec::with_capacity(found.len());
    for d in found {
        let parent = roles
            .iter()
            .find(|(pid, _)| *pid == d.ppid)
            .map(|(_, r)| *r);
        let role = match parent {
            // Named workers are loaders whatever started them (a forkserver, a helper).
            _ if named && d.comm == LOADER_WORKER_NAME => Role::Loader,
            Some(Role::Loader) => Role::Loader,
            Some(Role::Other) => Role::Other,
            // What a forkserver forks carries its command line too.
            Some(Role::Forkserver) if named => Role::Other,
            Some(Role::Forkserver) => Role::Loader,
            _ if d.cmdline.contains(FORKSERVER) => Role::Forkserver,
            _ if named => Role::Other,
            _ if HELPERS.iter().any(|h| d.cmdline.contains(h)) => Role::Other,
            _ if rank_exe.zip(d.exe.as_deref()).is_some_and(|(a, b)| a != b) => Role::Other,
            _ => Role::Loader,
        };
        roles.push((d.pid, role));
    }
    roles
        .into_iter()
        .filter(|(_, role)| *role == Role::Loader)
        .map(|(pid, _)| pid)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PYTHON: &str = "/usr/bin/python3.12";

    fn child(pid: u32, ppid: u32, comm: &str, exe: &str, cmdline: &str) -> Descendant {
        Descendant {
            pid,
            ppid,
            comm: comm.into(),
            exe: Some(exe.into()),
            cmdline: cmdline.into(),
        }
    }

    /// A rank (pid 1) with wandb-core, the inductor compile sidecar and its pool, and a
    /// forkserver with its resource tracker; `worker_comm` names the loader's two workers,
    /// forked by the forkserver, one of which runs a decoder of its own.
    fn rank_tree(worker_comm: &str) -> Vec<Descendant> {
        vec![
            child(10, 1, "wandb-core", "/opt/venv/lib/python3.12/site-packages/wandb/bin/wandb-core", "/opt/venv/lib/python3.12/site-packages/wandb/bin/wandb-core --port-filename /tmp/x"),
            child(11, 1, "python3", PYTHON, "/usr/bin/python3 /opt/venv/lib/python3.12/site-packages/torch/_inductor/compile_worker/__main__.py --workers=2 --parent=1"),
            child(12, 1, "python3", PYTHON, "/usr/bin/python3 -c from multiprocessing.forkserver import main; main(8, 9, ['__main__'], **{'sys_path': []})"),
            child(13, 1, "python3", PYTHON, "/usr/bin/python3 -c from multiprocessing.resource_tracker import main;main(7)"),
            child(20, 11, "python3", PYTHON, "/usr/bin/python3 /opt/venv/lib/python3.12/site-packages/torch/_inductor/compile_worker/__main__.py --workers=2 --parent=1"),
            child(21, 11, "python3", PYTHON, "/usr/bin/python3 /opt/venv/lib/python3.12/site-packages/torch/_inductor/compile_worker/__main__.py --workers=2 --parent=1"),
            child(30, 12, worker_comm, PYTHON, "/usr/bin/python3 -c from multiprocessing.forkserver import main; main(8, 9, ['__main__'], **{'sys_path': []})"),
            child(31, 12, worker_comm, PYTHON, "/usr/bin/python3 -c from multiprocessing.forkserver import main; main(8, 9, ['__main__'], **{'sys_path': []})"),
            child(40, 30, "ffmpeg", "/usr/bin/ffmpeg", "ffmpeg -i clip.mp4 -f rawvideo -"),
        ]
    }

    #[test]
    fn named_workers_and_what_they_start_are_the_loaders() {
        assert_eq!(
            loader_workers(Some(PYTHON), &rank_tree(LOADER_WORKER_NAME)),
            vec![30, 31, 40]
        );
        // Names and parents decide alone: discovery reads no executables or command lines
        // where a worker is named.
        let unread: Vec<Descendant> = rank_tree(LOADER_WORKER_NAME)
            .into_iter()
            .map(|d| Descendant {
                exe: None,
                cmdline: String::new(),
                ..d
            })
            .collect();
        assert_eq!(loader_workers(None, &unread), vec![30, 31, 40]);
    }

    #[test]
    fn unnamed_workers_are_told_by_executable_and_helpers() {
        // Forkserver-started workers inherit its command line, yet they are the loader.
        assert_eq!(
            loader_workers(Some(PYTHON), &rank_tree("python3")),
            vec![30, 31, 40]
        );
        // A fork-started loader of an older PyTorch beside wandb-core.
        let plain = vec![
            child(
                10,
                1,
                "wandb-core",
                "/w/wandb-core",
                "/w/wandb/bin/wandb-core",
            ),
            child(11, 1, "python3", PYTHON, "/usr/bin/python3 train.py"),
            child(12, 1, "python3", PYTHON, "/usr/bin/python3 train.py"),
        ];
        assert_eq!(loader_workers(Some(PYTHON), &plain), vec![11, 12]);
        // Without the executables (not readable), only the helpers' command lines tell.
        let unreadable: Vec<Descendant> = plain
            .into_iter()
            .map(|d| Descendant { exe: None, ..d })
            .collect();
        assert_eq!(loader_workers(None, &unreadable), vec![11, 12]);
    }

    #[test]
    fn a_rank_without_children_has_no_loader() {
        assert!(loader_workers(Some(PYTHON), &[]).is_empty());
    }
}
