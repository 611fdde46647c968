//! The per-tick /proc files of the GPU processes and their workers, kept open between ticks.
//!
//! A tick reads three or four small files of every loader worker (stat, io, schedstat, the
//! blocking system call of one asleep) and five of every rank (stat, io, schedstat, its main
//! thread's stat, its busiest other thread's schedstat); `status` files, read every few
//! seconds, are opened each time. Opening one costs a path walk and a permission
//! check, closing it a release: together more than the read itself (measured on the
//! training-shaped bench: open and close were 25 % of the exporter's CPU). The kernel
//! regenerates a /proc file on every read from offset 0, so each is opened once and read
//! with one `pread` per tick. A kept descriptor stays bound to the task it was opened for:
//! once that task exits it answers ESRCH (gone) and is dropped, so a reused pid is never read
//! through an old descriptor. Files not read on a tick are closed at its end. Below anything
//! but a proc filesystem (the tests' fixture trees, whose files are replaced between ticks)
//! each read opens the file anew.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::{classify, ReadError};
use crate::source::read_from_start;

/// Most descriptors kept open: a node's worth of ranks and workers, well under the default
/// limit of 1,024 open files; past it a file is opened and closed on each read.
const MAX_KEPT: usize = 600;

/// /proc files kept open between ticks.
pub(crate) struct KeptFiles {
    /// Whether files are kept at all (only below a proc filesystem).
    keep: bool,
    /// Each open file, and whether it was read on this tick.
    files: HashMap<PathBuf, (File, bool)>,
}

impl KeptFiles {
    /// Files below `procfs`, kept where it is a proc filesystem.
    pub(crate) fn new(procfs: &Path) -> Self {
        Self::keeping(is_procfs(procfs))
    }

    fn keeping(keep: bool) -> Self {
        KeptFiles {
            keep,
            files: HashMap::new(),
        }
    }

    /// The file's whole text, read from offset 0 of its kept descriptor.
    pub(crate) fn read(&mut self, path: &Path) -> Result<String, ReadError> {
        if let Some((file, read)) = self.files.get_mut(path) {
            *read = true;
            let text = read_whole(path, file);
            // A task that exited answers ESRCH for good: its descriptor goes.
            if matches!(text, Err(ReadError::Gone)) {
                self.files.remove(path);
            }
            return text;
        }
        let file = File::open(path).map_err(|e| classify(path, &e))?;
        let text = read_whole(path, &file);
        if self.keep && text.is_ok() && self.files.len() < MAX_KEPT {
            self.files.insert(path.to_path_buf(), (file, true));
        }
        text
    }

    /// Closes the files not read since the last sweep; call once per tick.
    pub(crate) fn sweep(&mut self) {
        self.files.retain(|_, (_, read)| std::mem::take(read));
    }
}

/// A file's whole text from offset 0, in one `pread` where it fits the first buffer.
pub(super) fn read_whole(path: &Path, file: &File) -> Result<String, ReadError> {
    let bytes = read_from_start(file).map_err(|e| classify(path, &e))?;
    String::from_utf8(bytes).map_err(|_| ReadError::Other(format!("{}: not UTF-8", path.display())))
}

/// Whether `root` is a proc filesystem, whose files the kernel writes anew on every read.
fn is_procfs(root: &Path) -> bool {
    let Ok(path) = std::ffi::CString::new(root.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path and a zeroed statfs the call fills in.
    let mut info: libc::statfs = unsafe { std::mem::zeroed() };
    let answered = unsafe { libc::statfs(path.as_ptr(), &mut info) } == 0;
    answered && info.f_type as u64 == libc::PROC_SUPER_MAGIC as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn a_kept_file_is_read_anew_and_closed_when_no_longer_read() {
        let dir = std::env::temp_dir().join(format!("kept-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stat");
        std::fs::write(&path, "1 (a) S").unwrap();
        let mut kept = KeptFiles::keeping(true);
        assert_eq!(kept.read(&path).ok().as_deref(), Some("1 (a) S"));
        // Rewritten in place, as the kernel regenerates the text on each read.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .write_all_at(b"1 (a) R", 0)
            .unwrap();
        assert_eq!(kept.read(&path).ok().as_deref(), Some("1 (a) R"));
        kept.sweep();
        assert_eq!(kept.files.len(), 1);
        kept.sweep();
        assert!(kept.files.is_empty());
        assert!(matches!(
            kept.read(&dir.join("missing")),
            Err(ReadError::Gone)
        ));
        // A file longer than the buffer is read whole.
        let long = "x".repeat(3 * 4096 + 5);
        std::fs::write(&path, &long).unwrap();
        assert_eq!(kept.read(&path).ok().map(|t| t.len()), Some(long.len()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_task_that_exits_is_gone_and_its_descriptor_dropped() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let path = PathBuf::from(format!("/proc/{}/stat", child.id()));
        let mut kept = KeptFiles::new(Path::new("/proc"));
        assert!(kept.keep, "/proc is a proc filesystem");
        assert!(!KeptFiles::new(&std::env::temp_dir()).keep);
        assert!(kept.read(&path).is_ok());
        assert_eq!(kept.files.len(), 1);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(matches!(kept.read(&path), Err(ReadError::Gone)));
        assert!(kept.files.is_empty());
    }
}
