//! The objects of the guest's snapshot made immortal in its memory image.
//!
//! A run of CPython writes an object's reference count whenever it takes or drops a reference
//! to it, so every run wrote the counts of types, functions, module dicts and constants all over
//! the snapshot's heap, each write copying a page of the memory image for that instance. CPython
//! skips the count of an immortal object (on a 32-bit build, one whose count is at least
//! 2**30) and never frees it; an instance serves one run and is dropped, so nothing of the
//! snapshot needs freeing. Before the snapshot the guest lists its objects in its memory
//! (`guest-python/flowbox_sdk/immortal.py`): a marker, their number, and for each its address
//! and its type's. This sets the count of each to CPython's immortal value in the data segments
//! that hold the memory image, where the object's type is still at its place and its count is
//! that of a live mortal object: an object freed after it was listed has its memory either
//! free (whose first words are the allocator's links, never a type's address) or another
//! object's, and is left alone. Every instance still starts from the same memory.

use std::ops::Range;

use wasmparser::{BinaryReader, DataKind, DataSectionReader, Operator};

use super::binary::{DATA_SECTION, sections};

/// What the guest's list starts with (`immortal.py` writes it).
const MARKER: [u8; 16] = [
    0xae, 0x88, 0xdf, 0xfb, 0x56, 0xb9, 0xed, 0x43, 0x38, 0xa1, 0xd4, 0x1d, 0x67, 0xca, 0x9f, 0x30,
];

/// The least count of an immortal object on a 32-bit CPython (`_Py_IMMORTAL_MINIMUM_REFCNT`).
const IMMORTAL_MINIMUM: u32 = 1 << 30;

/// The count CPython gives an object it makes immortal (`_Py_IMMORTAL_INITIAL_REFCNT`).
const IMMORTAL: u32 = 5 << 28;

/// An active data segment of memory 0: where it lands and where its bytes are in the module.
struct Segment {
    address: u32,
    bytes: Range<usize>,
}

/// `module` with the count of each object its snapshot lists made immortal; None when its data
/// holds no list (or more than one marker), nothing listed could be made immortal, or it is
/// in a form this does not read.
pub(super) fn snapshot_objects_immortal(module: &[u8]) -> Option<Vec<u8>> {
    let segments = data_segments(module)?;
    let mut markers = segments.iter().flat_map(|segment| {
        let bytes = &module[segment.bytes.clone()];
        (0..bytes.len().saturating_sub(MARKER.len() - 1))
            .filter(move |&at| bytes[at..].starts_with(&MARKER))
            .map(move |at| segment.address as usize + at)
    });
    let list = markers.next()?;
    if markers.next().is_some() {
        return None;
    }
    let list = u32::try_from(list + MARKER.len()).ok()?;
    let listed = read_u32(module, &segments, list)?;
    // The entries lie within the image's data, or this is not a list.
    let image_end = segments.last()?.address as u64 + segments.last()?.bytes.len() as u64;
    if u64::from(list) + 4 + 8 * u64::from(listed) > image_end {
        return None;
    }
    // A count is below any address of the image's data: a word that holds such an address
    // is a link of a free list, say, not a count (CPython's free lists of tuples, lists and
    // dicts link the objects they keep through their first word, their type left in place).
    let lowest = segments.first()?.address;
    let mut patched = module.to_vec();
    let mut made = 0usize;
    for index in 0..listed {
        let entry = list + 4 + index * 8;
        let address = read_u32(module, &segments, entry)?;
        let type_address = read_u32(module, &segments, entry + 4)?;
        let Some(at) = file_range(&segments, address, 8) else {
            continue;
        };
        let word = |at: usize| u32::from_le_bytes(module[at..at + 4].try_into().unwrap());
        let references = word(at);
        if word(at + 4) == type_address && (1..lowest.min(IMMORTAL_MINIMUM)).contains(&references) {
            patched[at..at + 4].copy_from_slice(&IMMORTAL.to_le_bytes());
            made += 1;
        }
    }
    (made > 0).then_some(patched)
}

/// The active data segments of memory 0 with a constant address, by address; None when any
/// other segment is there or two overlap (the image is then not one this reads).
fn data_segments(module: &[u8]) -> Option<Vec<Segment>> {
    let mut segments = Vec::new();
    for (id, range) in sections(module)? {
        if id != DATA_SECTION {
            continue;
        }
        let reader = BinaryReader::new(&module[range.clone()], range.start);
        for datum in DataSectionReader::new(reader).ok()? {
            let datum = datum.ok()?;
            let DataKind::Active {
                memory_index: 0,
                offset_expr,
            } = datum.kind
            else {
                continue;
            };
            let mut operators = offset_expr.get_operators_reader();
            let Operator::I32Const { value } = operators.read().ok()? else {
                return None;
            };
            let start = datum.data.as_ptr() as usize - module.as_ptr() as usize;
            segments.push(Segment {
                address: value as u32,
                bytes: start..start + datum.data.len(),
            });
        }
    }
    segments.sort_by_key(|segment| segment.address);
    let overlap = segments
        .windows(2)
        .any(|pair| pair[0].address as usize + pair[0].bytes.len() > pair[1].address as usize);
    (!overlap).then_some(segments)
}

/// Where in the module the `len` bytes at `address` are, when one segment holds them all.
fn file_range(segments: &[Segment], address: u32, len: usize) -> Option<usize> {
    let after = segments.partition_point(|segment| segment.address <= address);
    let segment = &segments[after.checked_sub(1)?];
    let offset = (address - segment.address) as usize;
    (offset + len <= segment.bytes.len()).then_some(segment.bytes.start + offset)
}

/// The little-endian u32 at `address` of the memory image, where memory no segment fills is
/// zero; None past the 4 GiB an address reaches.
fn read_u32(module: &[u8], segments: &[Segment], address: u32) -> Option<u32> {
    let mut bytes = [0u8; 4];
    for (i, byte) in bytes.iter_mut().enumerate() {
        let address = address.checked_add(i as u32)?;
        if let Some(at) = file_range(segments, address, 1) {
            *byte = module[at];
        }
    }
    Some(u32::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(data ...)` of `bytes` at `address`.
    fn data(address: u32, bytes: &[u8]) -> String {
        let text: String = bytes.iter().map(|byte| format!("\\{byte:02x}")).collect();
        format!("(data (i32.const {address}) \"{text}\")")
    }

    /// `words` as little-endian bytes.
    fn le(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|word| word.to_le_bytes()).collect()
    }

    /// A module whose memory holds four objects and, from 0x400, `lists` copies of a list of
    /// them: at 0x100 a mortal object of type 0x200; at 0x110 one whose type is not the one
    /// listed; at 0x120 one immortal already; at 0x1fc one whose type lies past its segment.
    fn module(lists: u32) -> Vec<u8> {
        let list = [
            MARKER.to_vec(),
            le(&[4, 0x100, 0x200, 0x110, 0x200, 0x120, 0x200, 0x1fc, 0x200]),
        ]
        .concat();
        let segments = [
            data(0x100, &le(&[3, 0x200])),
            data(0x110, &le(&[2, 0x999])),
            data(0x120, &le(&[0x7000_0000, 0x200])),
            data(0x1fc, &le(&[1])),
            data(0x200, &le(&[0x200])),
        ]
        .into_iter()
        .chain((0..lists).map(|i| data(0x400 + i * 0x100, &list)))
        .collect::<String>();
        wat::parse_str(format!("(module (memory 1) {segments})")).unwrap()
    }

    /// The count of the object at `address` in `module`'s memory image.
    fn count(module: &[u8], address: u32) -> u32 {
        read_u32(module, &data_segments(module).unwrap(), address).unwrap()
    }

    #[test]
    fn a_listed_object_whose_type_is_in_place_becomes_immortal_and_the_rest_stay() {
        let before = module(1);
        let after = snapshot_objects_immortal(&before).expect("one object made immortal");
        assert_eq!(count(&after, 0x100), IMMORTAL);
        for address in [0x110, 0x120, 0x1fc] {
            assert_eq!(count(&after, address), count(&before, address));
        }
        let changed = before.iter().zip(&after).filter(|(a, b)| a != b).count();
        assert_eq!(
            (after.len(), changed),
            (before.len(), 2),
            "only its count changes"
        );
        wasmparser::Validator::new().validate_all(&after).unwrap();
    }

    #[test]
    fn a_module_without_one_list_is_left_as_it_is() {
        assert!(snapshot_objects_immortal(&module(0)).is_none());
        assert!(
            snapshot_objects_immortal(&module(2)).is_none(),
            "two markers: which?"
        );
        let nothing = wat::parse_str("(module (memory 1))").unwrap();
        assert!(snapshot_objects_immortal(&nothing).is_none());
        let past_the_image = [MARKER.to_vec(), le(&[u32::MAX, 0x100, 0x200])].concat();
        let segments = [data(0x100, &le(&[3, 0x200])), data(0x400, &past_the_image)].concat();
        let module = wat::parse_str(format!("(module (memory 1) {segments})")).unwrap();
        assert!(
            snapshot_objects_immortal(&module).is_none(),
            "a count past the image"
        );
    }
}
