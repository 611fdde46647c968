//! Finding the descendants of each GPU process (its data-loader workers and their children)
//! without a pass over all of /proc.
//!
//! The kernel lists a task's children in `/proc/<pid>/task/<tid>/children`, per thread: a
//! child forked by a thread other than the leader appears only in that thread's file. A
//! training rank carries 100-200 threads, so reading every thread's file on every discovery
//! cost more than the rest of a tick. Workers are forked by the thread that iterates the
//! DataLoader: the main thread as a rule, but the training function's thread where it runs
//! on one of its own (Ray Train), or a prefetch thread iterating the loader ahead of the
//! loop. So a full walk (every thread's file) finds which threads of the GPU process fork
//! (its *forking threads*), and a discovery in between reads the leader thread's file of each
//! process in the tree and the forking threads' files of the GPU process. Full walks are the
//! first [`EARLY_FULL_WALKS`] discoveries of a GPU process (a job starts its loaders in its
//! first seconds, after its CUDA context made it a GPU process) and every
//! [`FULL_WALK_EVERY`]th after. Descendants a full walk found under other threads are kept
//! between full walks while their parent is still in the tree. Between discoveries each tick
//! reads the leader's and the forking threads' files of the GPU process alone, and
//! rediscovers at once where they changed: a DataLoader without persistent workers replaces
//! them every epoch (and an evaluation loader starts its own at each evaluation), which a
//! discovery every few seconds would see seconds late, or not at all where an epoch is
//! shorter. Kernels without `children` files fall back to one /proc pass per discovery.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::children::{self, Descendant};
use super::{numeric_entries, procfs, read, read_stat, ReadError};

/// Every this many discoveries, every thread's `children` file is read, not only the leader's.
pub const FULL_WALK_EVERY: u32 = 6;
/// A GPU process's first this many discoveries are full walks (its first 10 s at the default
/// 5 s `discovery_interval`).
pub const EARLY_FULL_WALKS: u32 = 3;

/// The processes below a GPU process, as last discovered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Descendants {
    /// All of them, in breadth-first order: a parent before its children.
    pub all: Vec<u32>,
    /// The data-loader workers among them (see `children`).
    pub loaders: Vec<u32>,
}

/// The known descendants of a GPU process.
struct Tree {
    starttime: u64,
    descendants: Descendants,
    discovered_at: Duration,
    /// The children the leader thread and the forking threads of the GPU process had then
    /// (`None`: the leader's file is unreadable).
    watched_children: Option<Vec<u32>>,
    /// Threads of the GPU process other than the leader that a full walk found with children.
    forking: Vec<u32>,
    /// Discoveries since the last walk over every thread.
    since_full_walk: u32,
    /// Discoveries of this process so far.
    discoveries: u32,
}

/// Which `children` files a walk reads.
enum Walk<'a> {
    /// Every thread's, noting the GPU process's threads other than the leader that forked.
    Full(&'a mut Vec<u32>),
    /// The leader thread's of each process, and those of the GPU process's forking threads.
    Leaders(&'a [u32]),
}

/// The descendants of each GPU process, rediscovered every `discovery_interval`.
pub struct TreeFinder {
    procfs: PathBuf,
    discovery_interval: Duration,
    /// Whether the kernel has `children` files (`None` until first looked at).
    children_files: Option<bool>,
    trees: HashMap<u32, Tree>,
}

impl TreeFinder {
    /// A finder below the procfs root.
    pub fn new(procfs: &Path, discovery_interval: Duration) -> Self {
        TreeFinder {
            procfs: procfs.to_path_buf(),
            discovery_interval,
            children_files: None,
            trees: HashMap::new(),
        }
    }

    /// Forgets the trees of processes not in `live`.
    pub fn retain(&mut self, live: &BTreeSet<u32>) {
        self.trees.retain(|pid, _| live.contains(pid));
    }

    /// The descendants of `pid` (started at `starttime`), rediscovered when due.
    pub fn descendants(&mut self, pid: u32, starttime: u64, now: Duration) -> Descendants {
        let mut known = self.trees.remove(&pid).filter(|t| t.starttime == starttime);
        let mut forking = known
            .as_ref()
            .map(|t| t.forking.clone())
            .unwrap_or_default();
        let watched_children = self.watched_children(pid, &mut forking);
        let interval = self.discovery_interval;
        if let Some(tree) = known.take_if(|tree| {
            now.saturating_sub(tree.discovered_at) < interval
                && tree.watched_children == watched_children
        }) {
            let descendants = tree.descendants.clone();
            self.trees.insert(pid, Tree { forking, ..tree });
            return descendants;
        }
        let full = known.as_ref().is_none_or(|tree| {
            tree.discoveries < EARLY_FULL_WALKS || tree.since_full_walk + 1 >= FULL_WALK_EVERY
        });
        let all = match self.children_files {
            Some(false) => self.by_scan(pid),
            _ if full => self.by_children(pid, &mut Walk::Full(&mut forking)),
            _ => {
                let mut found = self.by_children(pid, &mut Walk::Leaders(&forking));
                self.keep_known(
                    pid,
                    &mut found,
                    known.as_ref().map(|t| &t.descendants.all[..]),
                );
                found
            }
        };
        let descendants = Descendants {
            loaders: self.loaders(pid, &all),
            all,
        };
        // A full walk may have found new forking threads: their children as of now.
        let watched_children = if full {
            self.watched_children(pid, &mut forking)
        } else {
            watched_children
        };
        self.trees.insert(
            pid,
            Tree {
                starttime,
                descendants: descendants.clone(),
                discovered_at: now,
                watched_children,
                forking,
                since_full_walk: if full {
                    0
                } else {
                    known.as_ref().map_or(0, |t| t.since_full_walk + 1)
                },
                discoveries: known.map_or(0, |t| t.discoveries) + 1,
            },
        );
        descendants
    }

    /// The children the leader thread of `pid` and its `forking` threads forked, as the kernel
    /// lists them (in order of creation, the leader's first); `None` where the leader's file
    /// cannot be read. A forking thread that exited is dropped from `forking`.
    fn watched_children(&self, pid: u32, forking: &mut Vec<u32>) -> Option<Vec<u32>> {
        let children_of = |tid: u32| {
            let text = read(&self.procfs.join(format!("{pid}/task/{tid}/children"))).ok()?;
            procfs::parse_children(&text).ok()
        };
        let mut all = children_of(pid)?;
        forking.retain(|&tid| match children_of(tid) {
            Some(children) => {
                all.extend(children);
                true
            }
            None => false,
        });
        Some(all)
    }

    /// The loader workers among `all` (descendants of `root`), from their names, parents,
    /// executables and command lines; one that exited meanwhile is left out. Where a
    /// descendant carries the DataLoader's worker name, names and parents decide alone (see
    /// `children`), so executables and command lines are read only where none does.
    fn loaders(&self, root: u32, all: &[u32]) -> Vec<u32> {
        let exe = |pid: u32| {
            std::fs::read_link(self.procfs.join(format!("{pid}/exe")))
                .ok()
                .map(|path| path.to_string_lossy().into_owned())
        };
        let mut found: Vec<Descendant> = all
            .iter()
            .filter_map(|&pid| {
                let line = read(&self.procfs.join(format!("{pid}/stat"))).ok()?;
                let stat = procfs::parse_stat(&line).ok()?;
                Some(Descendant {
                    pid,
                    ppid: stat.ppid,
                    comm: procfs::parse_comm(&line).unwrap_or_default().to_string(),
                    exe: None,
                    cmdline: String::new(),
                })
            })
            .collect();
        if found.iter().any(|d| d.comm == children::LOADER_WORKER_NAME) {
            return children::loader_workers(None, &found);
        }
        for d in &mut found {
            d.exe = exe(d.pid);
            d.cmdline = read(&self.procfs.join(format!("{}/cmdline", d.pid)))
                .unwrap_or_default()
                .replace('\0', " ");
        }
        children::loader_workers(exe(root).as_deref(), &found)
    }

    /// Keeps the previously known descendants a leader-only walk did not see (forked by
    /// another thread), while each is alive and its parent is still in the tree: a pid reused
    /// by an unrelated process has another parent.
    fn keep_known(&self, root: u32, found: &mut Vec<u32>, known: Option<&[u32]>) {
        let mut in_tree: BTreeSet<u32> = found.iter().copied().collect();
        in_tree.insert(root);
        for &pid in known.unwrap_or_default() {
            if in_tree.contains(&pid) {
                continue;
            }
            let parent = read_stat(&self.procfs.join(format!("{pid}/stat")))
                .ok()
                .map(|stat| stat.ppid);
            if parent.is_some_and(|ppid| in_tree.contains(&ppid)) {
                in_tree.insert(pid);
                found.push(pid);
            }
        }
    }

    /// Walks the tree through the `children` files (see [`Walk`]). Only the tree is visited.
    fn by_children(&mut self, root: u32, walk: &mut Walk) -> Vec<u32> {
        let mut found = Vec::new();
        let mut seen = BTreeSet::from([root]);
        let mut queue = VecDeque::from([root]);
        while let Some(pid) = queue.pop_front() {
            let threads = match walk {
                Walk::Full(_) => numeric_entries(&self.procfs.join(format!("{pid}/task"))),
                Walk::Leaders(forking) if pid == root => std::iter::once(pid)
                    .chain(forking.iter().copied())
                    .collect(),
                Walk::Leaders(_) => vec![pid],
            };
            for tid in threads {
                match read(&self.procfs.join(format!("{pid}/task/{tid}/children"))) {
                    Ok(text) => {
                        self.children_files = Some(true);
                        let children = procfs::parse_children(&text).unwrap_or_default();
                        if let Walk::Full(forking) = walk {
                            let forked = pid == root && tid != root && !children.is_empty();
                            if forked && !forking.contains(&tid) {
                                forking.push(tid);
                            }
                        }
                        for child in children {
                            if seen.insert(child) {
                                found.push(child);
                                queue.push_back(child);
                            }
                        }
                    }
                    Err(ReadError::Gone)
                        if self.children_files.is_none()
                            && self.procfs.join(format!("{pid}/stat")).exists() =>
                    {
                        // The process is there but the file is not: no CONFIG_PROC_CHILDREN.
                        tracing::debug!("kernel has no /proc/<pid>/task/<tid>/children; discovering workers by scanning /proc");
                        self.children_files = Some(false);
                        return self.by_scan(root);
                    }
                    Err(_) => {}
                }
            }
        }
        found
    }

    /// Fallback: one pass over every /proc/<pid>/stat to build the parent map.
    fn by_scan(&self, root: u32) -> Vec<u32> {
        let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
        for pid in numeric_entries(&self.procfs) {
            if let Ok(stat) = read_stat(&self.procfs.join(format!("{pid}/stat"))) {
                children.entry(stat.ppid).or_default().push(pid);
            }
        }
        let mut found = Vec::new();
        let mut queue = VecDeque::from([root]);
        while let Some(pid) = queue.pop_front() {
            for &child in children.get(&pid).into_iter().flatten() {
                if child != root && !found.contains(&child) {
                    found.push(child);
                    queue.push_back(child);
                }
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process's `stat` line with its parent and a start time of 100.
    fn stat(pid: u32, ppid: u32) -> String {
        // Fields 3 to 42 of proc(5): state, ppid, ..., utime 1, stime 1, threads 1, start 100.
        let mut fields = vec!["0"; 40];
        fields[0] = "S";
        let ppid = ppid.to_string();
        fields[1] = &ppid;
        (fields[11], fields[12], fields[17], fields[19]) = ("1", "1", "1", "100");
        format!("{pid} (python3) {}\n", fields.join(" "))
    }

    fn write(root: &Path, files: &[(&str, String)]) {
        for (path, text) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    /// A process `pid` forked by `ppid`, without children.
    fn process(root: &Path, pid: u32, ppid: u32) {
        write(
            root,
            &[
                (&format!("{pid}/stat"), stat(pid, ppid)),
                (&format!("{pid}/task/{pid}/children"), String::new()),
            ],
        );
    }

    /// A rank 100 (threads 100 and 101) whose leader forked worker 200, and whose worker's
    /// thread 201 forked 300 (a worker's own helper); `third_parent` is 300's parent.
    fn write_proc(root: &Path, third_parent: u32) {
        write(
            root,
            &[
                ("100/stat", stat(100, 1)),
                ("100/task/100/children", "200 ".to_string()),
                ("100/task/101/children", String::new()),
                ("200/task/201/children", "300 ".to_string()),
            ],
        );
        process(root, 200, 100);
        process(root, 300, third_parent);
    }

    #[test]
    fn leader_walks_between_full_walks_keep_what_other_threads_forked() {
        let root = std::env::temp_dir().join(format!("gbe-tree-{}", std::process::id()));
        write_proc(&root, 200);
        let mut finder = TreeFinder::new(&root, Duration::from_secs(5));
        let at = |n: u64| Duration::from_secs(5 * n);
        let early = u64::from(EARLY_FULL_WALKS);
        // The first discoveries walk every thread's file.
        for n in 0..early {
            assert_eq!(finder.descendants(100, 100, at(n)).all, vec![200, 300]);
        }
        // Within the interval: the same answer, nothing rediscovered.
        let within = at(early - 1) + Duration::from_secs(1);
        assert_eq!(finder.descendants(100, 100, within).all, vec![200, 300]);
        // A leader-only walk finds 200; 300 is kept because its parent is still in the tree.
        std::fs::write(root.join("200/task/201/children"), "").unwrap();
        assert_eq!(finder.descendants(100, 100, at(early)).all, vec![200, 300]);
        // 300's pid reused by an unrelated process: dropped.
        write_proc(&root, 4242);
        std::fs::write(root.join("200/task/201/children"), "").unwrap();
        assert_eq!(finder.descendants(100, 100, at(early + 1)).all, vec![200]);
        // A process forked by thread 201 after the last full walk appears at the next one.
        write_proc(&root, 200);
        let next_full = early + u64::from(FULL_WALK_EVERY) - 1;
        for n in early + 2..next_full {
            assert_eq!(finder.descendants(100, 100, at(n)).all, vec![200], "{n}");
        }
        assert_eq!(
            finder.descendants(100, 100, at(next_full)).all,
            vec![200, 300]
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn workers_replaced_between_discoveries_are_found_on_the_next_tick() {
        let root = std::env::temp_dir().join(format!("gbe-tree-epoch-{}", std::process::id()));
        write_proc(&root, 200);
        let mut finder = TreeFinder::new(&root, Duration::from_secs(5));
        let tick = |n: u64| Duration::from_secs(n);
        assert_eq!(finder.descendants(100, 100, tick(0)).all, vec![200, 300]);
        // The epoch ends: the leader's worker 200 exits and 400 replaces it, a second into a
        // five-second discovery interval.
        std::fs::remove_dir_all(root.join("200")).unwrap();
        std::fs::write(root.join("100/task/100/children"), "400 ").unwrap();
        process(&root, 400, 100);
        assert_eq!(finder.descendants(100, 100, tick(1)).all, vec![400]);
        // Unchanged since: nothing rediscovered, the same answer.
        assert_eq!(finder.descendants(100, 100, tick(2)).all, vec![400]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn workers_of_a_thread_that_iterates_the_loader_are_followed_every_tick() {
        // The training function on a thread of its own (101) iterates a DataLoader whose
        // workers it forks; the leader forked nothing. Long past the early full walks, an
        // epoch ends a second after a discovery: its workers are replaced at the next tick.
        let root = std::env::temp_dir().join(format!("gbe-tree-thread-{}", std::process::id()));
        write(
            &root,
            &[
                ("100/stat", stat(100, 1)),
                ("100/task/100/children", String::new()),
                ("100/task/101/children", String::new()),
            ],
        );
        let mut finder = TreeFinder::new(&root, Duration::from_secs(5));
        let at = |seconds: u64| Duration::from_secs(seconds);
        // Its CUDA context made it a GPU process before it started its loader.
        assert!(finder.descendants(100, 100, at(0)).all.is_empty());
        std::fs::write(root.join("100/task/101/children"), "500 501 ").unwrap();
        process(&root, 500, 100);
        process(&root, 501, 100);
        // Seen at the next discovery (a full walk, early in the process's life).
        assert!(finder.descendants(100, 100, at(3)).all.is_empty());
        assert_eq!(finder.descendants(100, 100, at(5)).all, vec![500, 501]);
        for n in 2..20 {
            assert_eq!(finder.descendants(100, 100, at(5 * n)).all, vec![500, 501]);
        }
        // The epoch ends at 96 s, four seconds before the next discovery is due.
        for pid in [500, 501] {
            std::fs::remove_dir_all(root.join(pid.to_string())).unwrap();
        }
        std::fs::write(root.join("100/task/101/children"), "502 503 ").unwrap();
        process(&root, 502, 100);
        process(&root, 503, 100);
        assert_eq!(finder.descendants(100, 100, at(97)).all, vec![502, 503]);
        assert_eq!(finder.descendants(100, 100, at(100)).all, vec![502, 503]);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
