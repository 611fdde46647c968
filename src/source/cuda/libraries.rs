//! The CUDA driver a process maps, from `/proc/<pid>/maps`. Pure.

/// One mapped copy of the driver: the file as the process sees it, and the device and inode
/// that tell copies apart (each container image has its own).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MappedLibrary {
    pub path: String,
    pub device: String,
    pub inode: u64,
}

/// Whether a mapped file is the CUDA driver (`libcuda.so.1`, `libcuda.so.550.54.15`, ...).
fn is_driver(path: &str) -> bool {
    path.rsplit('/')
        .next()
        .is_some_and(|name| name.starts_with("libcuda.so"))
}

/// The driver libraries in a maps file, once each.
pub fn cuda_driver(maps: &str) -> Vec<MappedLibrary> {
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
        if inode == 0 || !is_driver(&path) || path.ends_with(" (deleted)") {
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
    fn the_driver_is_found_once_and_other_cuda_libraries_are_not_it() {
        let maps = "\
7f0000000000-7f0000100000 r--p 00000000 08:01 1234 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
7f0000100000-7f0000900000 r-xp 00100000 08:01 1234 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
7f0001000000-7f0001100000 r-xp 00000000 08:01 99 /opt/venv/nvidia/cuda_runtime/lib/libcudart.so.12
7f0002000000-7f0002100000 r-xp 00000000 00:2f 77 /run/my dir/libcuda.so.1
7f0003000000-7f0003100000 r-xp 00000000 08:01 55 /old/libcuda.so.1 (deleted)
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
short line
";
        let found = cuda_driver(maps);
        let paths: Vec<&str> = found.iter().map(|l| l.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
                "/run/my dir/libcuda.so.1"
            ]
        );
        assert_eq!((found[0].device.as_str(), found[0].inode), ("08:01", 1234));
    }
}
