//! Where an exported function of a shared library starts, as the file offset a uprobe takes.
//! Pure: parses the bytes of the file.

use goblin::elf::program_header::PT_LOAD;
use goblin::elf::Elf;

/// The file offset of each of `names` the library defines (its dynamic symbols, or its full
/// symbol table for a copy linked statically into a program), in the order asked; `None` for
/// those it lacks.
pub fn offsets(bytes: &[u8], names: &[&str]) -> Result<Vec<Option<u64>>, String> {
    let elf = Elf::parse(bytes).map_err(|e| format!("not an ELF file: {e}"))?;
    let lookup = |name: &str| {
        let dynamic = elf
            .dynsyms
            .iter()
            .map(|s| (s, elf.dynstrtab.get_at(s.st_name)));
        let full = elf.syms.iter().map(|s| (s, elf.strtab.get_at(s.st_name)));
        dynamic
            .chain(full)
            .find(|(symbol, found)| {
                *found == Some(name) && symbol.is_function() && symbol.st_value != 0
            })
            .map(|(symbol, _)| symbol.st_value)
    };
    Ok(names
        .iter()
        .map(|name| {
            let address = lookup(name)?;
            // The loadable segment holding it maps file offsets to addresses.
            elf.program_headers
                .iter()
                .find(|h| h.p_type == PT_LOAD && h.vm_range().contains(&(address as usize)))
                .map(|h| address - h.p_vaddr + h.p_offset)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary's own symbols: its file offsets must hold its code.
    #[test]
    fn a_function_is_found_at_its_code_and_a_missing_one_is_none() {
        let exe = std::env::current_exe().unwrap();
        let bytes = std::fs::read(&exe).unwrap();
        let found = offsets(&bytes, &["main", "no_such_function_here"]).unwrap();
        assert!(found[0].is_some_and(|offset| (offset as usize) < bytes.len()));
        assert_eq!(found[1], None);
        assert!(offsets(b"not an elf", &["main"]).is_err());
    }
}
