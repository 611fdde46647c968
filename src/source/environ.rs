//! A process's initial environment as `/proc/<pid>/environ` holds it (readable with ptrace
//! access): `NAME=value` entries separated by NUL bytes. What its launcher set there does not
//! change.

/// The value of `name` in `environ`, where it is set and reads as UTF-8.
pub fn variable<'a>(environ: &'a [u8], name: &str) -> Option<&'a str> {
    environ.split(|&b| b == 0).find_map(|entry| {
        let value = entry.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
        std::str::from_utf8(value).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variable_is_found_by_its_whole_name() {
        let environ = b"WORLD_SIZE_X=9\0WORLD_SIZE=4\0EMPTY=\0BAD=\xff\0";
        assert_eq!(variable(environ, "WORLD_SIZE"), Some("4"));
        assert_eq!(variable(environ, "EMPTY"), Some(""));
        assert_eq!(variable(environ, "BAD"), None);
        assert_eq!(variable(environ, "MISSING"), None);
        assert_eq!(variable(b"", "WORLD_SIZE"), None);
    }
}
