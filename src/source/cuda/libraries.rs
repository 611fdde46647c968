//! The libraries a process maps that the probes watch — the CUDA driver and NCCL — from
//! `/proc/<pid>/maps`. Pure.

/// One mapped copy of the driver: the file as the process sees it, and the device and inode
/// that tell copies apart (each container image has its own).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MappedLibrary {
    pub path: String,
    pub device: String,
    pub inode: u64,
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Whether a mapped file is the CUDA driver (`libcuda.so.1`, `libcuda.so.550.54.15`, ...).
pub fn is_driver(path: &str) -> bool {
    file_name(path).starts_with("libcuda.so")
}

/// Whether a mapped file is NCCL (`libnccl.so.2`, from the nvidia-nccl wheel or the system).
fn is_nccl(path: &str) -> bool {
    file_name(path).starts_with("libnccl.so")
}

/// The driver and NCCL libraries in a maps file, once each.
pub fn probed_libraries(maps: &str) -> Vec<MappedLibrary> {
    let mut found: Vec<MappedLibrary> = Vec::new();
    for line in maps.lines() {
        // address perms offset dev inode path
        let mut fields = line.split_ascii_whitespace();
        let (Some(_), Some(_), Some(_), Some(device), Some(inode)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            continue;
        };
        let path = fields.collect::<Vec<_>>().join(" ");
        let Ok(inode) = inode.parse::<u64>() else {
            continue;
        };
        // A library replaced on disk after it was mapped cannot be probed by path.
        let probed = is_driver(&path) || is_nccl(&path);
        if inode == 0 || !probed || path.ends_with(" (deleted)") {
            continue;
        }
        let library = MappedLibrary {
            path,
            device: device.to_string(),
            inode,
        };
        if !found.contains(&library) {
            found.push(library);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_and_nccl_are_found_once_and_other_cuda_libraries_are_not_them() {
        let maps = "\
7f0000000000-7f0000100000 r--p 00000000 08:01 1234 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
7f0000100000-7f0000900000 r-xp 00100000 08:01 1234 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
7f0001000000-7f0001100000 r-xp 00000000 08:01 99 /opt/venv/nvidia/cuda_runtime/lib/libcudart.so.12
7f0002000000-7f0002100000 r-xp 00000000 00:2f 77 /run/my dir/libcuda.so.1
7f0003000000-7f0003100000 r-xp 00000000 08:01 55 /old/libcuda.so.1 (deleted)
7f0004000000-7f0004100000 r-xp 00000000 08:01 66 /opt/venv/nvidia/nccl/lib/libnccl.so.2
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
short line
";
        let found = probed_libraries(maps);
        let paths: Vec<&str> = found.iter().map(|l| l.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
                "/run/my dir/libcuda.so.1",
                "/opt/venv/nvidia/nccl/lib/libnccl.so.2"
            ]
        );
        assert_eq!((found[0].device.as_str(), found[0].inode), ("08:01", 1234));
        assert!(is_driver(&found[1].path) && !is_driver(&found[2].path));
    }
}
