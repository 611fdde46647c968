//! Finding the descendants of each GPU process (its data-loader workers and their children)
//! without a pass over all of /proc.
//!
//! The kernel lists a task's children in `/proc/<pid>/task/<tid>/children`, per thread: a
//! child forked by a thread other than the leader appears only in that thread's file. A
//! training rank carries 100-200 threads, so reading every thread's file on every discovery
//! cost more than the rest of a tick. Workers are forked by the thread that iterates the
//! DataLoader (the main thread) and torchrun starts its ranks from its main thread, so a
//! discovery reads the leader thread's file of each process in the tree, and only every
//! [`FULL_WALK_EVERY`]th discovery reads every thread's file. Descendants a full walk found
//! under other threads are kept between full walks while their parent is still in the tree.
//! Between discoveries each tick reads the leader thread's file of the GPU process alone, and
//! rediscovers at once where it changed: a DataLoader without persistent workers replaces them
//! every epoch (and an evaluation loader starts its own at each evaluation), which a
//! discovery every few seconds would see seconds late, or not at all where an epoch is shorter.
//! Kernels without `children` files fall back to one /proc pass per discovery.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::children::{self, Descendant};
use super::{numeric_entries, procfs, read, read_stat, ReadError};

/// Every this many discoveries, every thread's `children` file is read, not only the leader's.
pub const FULL_WALK_EVERY: u32 = 6;

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
    /// The children the leader thread of the GPU process had then (`None`: unreadable).
    leader_children: Option<Vec<u32>>,
    /// Discoveries since the last walk over every thread.
    since_full_walk: u32,
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
        let same_process = |tree: &&Tree| tree.starttime == starttime;
        let leader_children = self.leader_children(pid);
        if let Some(tree) = self.trees.get(&pid).filter(same_process) {
            let due = now.saturating_sub(tree.discovered_at) >= self.discovery_interval;
            if !due && tree.leader_children == leader_children {
                return tree.descendants.clone();
            }
        }
        let known = self.trees.remove(&pid).filter(|tree| same_process(&tree));
        let full = known
            .as_ref()
            .is_none_or(|tree| tree.since_full_walk + 1 >= FULL_WALK_EVERY);
        let all = match self.children_files {
            Some(false) => self.by_scan(pid),
            _ if full => self.by_children(pid, true),
            _ => {
                let mut found = self.by_children(pid, false);
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
        self.trees.insert(
            pid,
            Tree {
                starttime,
                descendants: descendants.clone(),
                discovered_at: now,
                leader_children,
                since_full_walk: if full {
                    0
                } else {
                    known.map_or(0, |t| t.since_full_walk + 1)
                },
            },
        );
        descendants
    }

    /// The children the leader thread of `pid` forked, as the kernel lists them (in order of
    /// creation); `None` where the file cannot be read.
    fn leader_children(&self, pid: u32) -> Option<Vec<u32>> {
        let text = read(&self.procfs.join(format!("{pid}/task/{pid}/children"))).ok()?;
        procfs::parse_children(&text).ok()
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

    /// Walks the tree through the `children` files: every thread's when `all_threads`, else
    /// the leader thread's of each process. Only the tree is visited.
    fn by_children(&mut self, root: u32, all_threads: bool) -> Vec<u32> {
        let mut found = Vec::new();
        let mut seen = BTreeSet::from([root]);
        let mut queue = VecDeque::from([root]);
        while let Some(pid) = queue.pop_front() {
            let threads = if all_threads {
                numeric_entries(&self.procfs.join(format!("{pid}/task")))
            } else {
                vec![pid]
            };
            for tid in threads {
                match read(&self.procfs.join(format!("{pid}/task/{tid}/children"))) {
                    Ok(text) => {
                        self.children_files = Some(true);
                        for child in procfs::parse_children(&text).unwrap_or_default() {
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

    /// A /proc with a rank (100, threads 100 and 101), a worker 200 forked by the leader and
    /// a worker 300 forked by thread 101; `third_parent` is 300's parent pid.
    fn write_proc(root: &Path, third_parent: u32) {
        // Fields 3 to 42 of proc(5): state, ppid, ..., utime 1, stime 1, threads 1, start 100.
        let stat = |pid: u32, ppid: u32| {
            let mut fields = vec!["0"; 40];
            fields[0] = "S";
            let ppid = ppid.to_string();
            fields[1] = &ppid;
            (fields[11], fields[12], fields[17], fields[19]) = ("1", "1", "1", "100");
            format!("{pid} (python3) {}\n", fields.join(" "))
        };
        let files = [
            ("100/stat", stat(100, 1)),
            ("100/task/100/children", "200 ".to_string()),
            ("100/task/101/children", "300 ".to_string()),
            ("200/stat", stat(200, 100)),
            ("200/task/200/children", String::new()),
            ("300/stat", stat(300, third_parent)),
            ("300/task/300/children", String::new()),
        ];
        for (path, text) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    #[test]
    fn leader_walks_between_full_walks_keep_workers_of_other_threads() {
        let root = std::env::temp_dir().join(format!("gbe-tree-{}", std::process::id()));
        write_proc(&root, 100);
        let mut finder = TreeFinder::new(&root, Duration::from_secs(5));
        let at = |n: u64| Duration::from_secs(5 * n);
        // First discovery: every thread's file.
        assert_eq!(finder.descendants(100, 100, at(0)).all, vec![200, 300]);
        // Within the interval: the same answer, nothing read.
        assert_eq!(
            finder
                .descendants(100, 100, at(0) + Duration::from_secs(1))
                .all,
            vec![200, 300]
        );
        // A leader-only walk finds 200; 300 is kept because its parent is still the rank.
        std::fs::write(root.join("100/task/101/children"), "").unwrap();
        assert_eq!(finder.descendants(100, 100, at(1)).all, vec![200, 300]);
        // 300's pid reused by an unrelated process: dropped.
        write_proc(&root, 4242);
        std::fs::write(root.join("100/task/101/children"), "").unwrap();
        assert_eq!(finder.descendants(100, 100, at(2)).all, vec![200]);
        // A worker forked by thread 101 after the last full walk appears at the next one.
        write_proc(&root, 100);
        for n in 3..FULL_WALK_EVERY as u64 {
            assert_eq!(
                finder.descendants(100, 100, at(n)).all,
                vec![200],
                "discovery {n}"
            );
        }
        assert_eq!(
            finder.descendants(100, 100, at(FULL_WALK_EVERY as u64)).all,
            vec![200, 300]
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn workers_replaced_between_discoveries_are_found_on_the_next_tick() {
        let root = std::env::temp_dir().join(format!("gbe-tree-epoch-{}", std::process::id()));
        write_proc(&root, 100);
        let mut finder = TreeFinder::new(&root, Duration::from_secs(5));
        let tick = |n: u64| Duration::from_secs(n);
        assert_eq!(finder.descendants(100, 100, tick(0)).all, vec![200, 300]);
        // The epoch ends: the leader's worker 200 exits and 400 replaces it, a second into a
        // five-second discovery interval.
        std::fs::remove_dir_all(root.join("200")).unwrap();
        for (path, text) in [
            ("100/task/100/children", "400 ".to_string()),
            ("400/task/400/children", String::new()),
        ] {
            std::fs::create_dir_all(root.join(path).parent().unwrap()).unwrap();
            std::fs::write(root.join(path), text).unwrap();
        }
        let stat = std::fs::read_to_string(root.join("300/stat")).unwrap();
        std::fs::write(root.join("400/stat"), stat.replacen("300", "400", 1)).unwrap();
        assert_eq!(finder.descendants(100, 100, tick(1)).all, vec![400, 300]);
        // Unchanged since: nothing rediscovered, the same answer.
        assert_eq!(finder.descendants(100, 100, tick(2)).all, vec![400, 300]);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
