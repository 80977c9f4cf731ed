//! Reading and writing the sections of a component or a core module, for the passes that
//! rewrite the guest before it is compiled (`trim`, `link`, `reach`).

use std::ops::Range;

use wasmparser::BinaryReader;

/// A component's and a core module's header: the magic number and the version.
pub(super) const HEADER: usize = 8;
/// The ids of a component's core module, core instance, alias and canonical function sections.
pub(super) const CORE_MODULE_SECTION: u8 = 1;
pub(super) const CORE_INSTANCE_SECTION: u8 = 2;
pub(super) const ALIAS_SECTION: u8 = 6;
pub(super) const CANONICAL_SECTION: u8 = 8;

/// The ids of a core module's sections.
pub(super) const CUSTOM_SECTION: u8 = 0;
pub(super) const IMPORT_SECTION: u8 = 2;
pub(super) const GLOBAL_SECTION: u8 = 6;
pub(super) const EXPORT_SECTION: u8 = 7;
pub(super) const START_SECTION: u8 = 8;
pub(super) const ELEMENT_SECTION: u8 = 9;
pub(super) const CODE_SECTION: u8 = 10;
pub(super) const DATA_SECTION: u8 = 11;
pub(super) const DATA_COUNT_SECTION: u8 = 12;

/// A function body of no locals that traps: `unreachable`, `end`, after its size.
pub(super) const TRAPPING_BODY: [u8; 4] = [3, 0, 0x00, 0x0b];

/// The id and the content of each section after the header.
pub(super) fn sections(binary: &[u8]) -> Option<Vec<(u8, Range<usize>)>> {
    let mut reader = BinaryReader::new(binary.get(HEADER..)?, HEADER);
    let mut sections = Vec::new();
    while !reader.eof() {
        let id = reader.read_u8().ok()?;
        let size = usize::try_from(reader.read_var_u32().ok()?).ok()?;
        let start = reader.original_position();
        reader.read_bytes(size).ok()?;
        sections.push((id, start..start + size));
    }
    Some(sections)
}

pub(super) fn push_section(binary: &mut Vec<u8>, id: u8, content: &[u8]) {
    binary.push(id);
    leb128(content.len(), binary);
    binary.extend_from_slice(content);
}

/// `value` as an unsigned LEB128 number.
pub(super) fn leb128(mut value: usize, out: &mut Vec<u8>) {
    loop {
        let low = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(low);
            return;
        }
        out.push(low | 0x80);
    }
}

/// `name` as the binary format writes a name: its length, then its bytes.
pub(super) fn push_name(out: &mut Vec<u8>, name: &str) {
    leb128(name.len(), out);
    out.extend_from_slice(name.as_bytes());
}

/// The byte range of each entry of a section's content `len` bytes long, from where each
/// starts (in order): an entry ends where the next starts, the last with the content.
pub(super) fn entry_ranges(starts: &[usize], len: usize) -> Vec<Range<usize>> {
    let ends = starts.iter().skip(1).copied().chain([len]);
    starts
        .iter()
        .zip(ends)
        .map(|(&start, end)| start..end)
        .collect()
}
