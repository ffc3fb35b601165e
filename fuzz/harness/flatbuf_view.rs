//! The body of the `flatbuf_view` fuzz target: `shoal topic echo`'s schema-less view of a FlatBuffers payload's
//! root table (`tools/src/flatbuf.rs`, compiled here from the same file) on the input bytes. Shared (`#[path]`) by
//! `fuzz_targets/flatbuf_view.rs` and by `tools/tests/fuzz_flatbuf_view.rs`, which runs the committed seeds through
//! it in the test suite.
//!
//! Input: the payload bytes.
//!
//! Oracle: nothing panics, and everything a view reports is what the buffer holds, read again here independently
//! by the FlatBuffers layout: the root offset, the file identifier, the vtable's slots and the present fields'
//! offsets, each field's width (up to the next field or the table's end, all inside the buffer), its inline value,
//! the string or offset target it reports (inside the buffer, 4-aligned, the string's bytes and NUL terminator);
//! the JSON and text forms show every field.

#[path = "../../tools/src/flatbuf.rs"]
mod flatbuf;

/// What one input did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    /// The bytes were viewed as a FlatBuffer.
    pub(crate) viewed: bool,
    /// Present fields of the root table.
    pub(crate) fields: usize,
    /// Fields shown as strings.
    pub(crate) strings: usize,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Runs one input (see the module docs).
pub(crate) fn run(b: &[u8]) -> Run {
    let Ok(view) = flatbuf::view(b) else { return Run::default() };
    let root = usize::try_from(u32_at(b, 0)).expect("a u32 fits usize");
    assert_eq!(view.root, root, "root offset");
    assert!(root >= 4 && root + 4 <= b.len(), "root table at {root} of a {} B buffer", b.len());
    let id_bytes = &b[4..8.min(b.len())];
    let id = (root >= 8 && id_bytes.iter().all(|c| c.is_ascii_graphic()))
        .then(|| String::from_utf8(id_bytes.to_vec()).expect("ASCII"));
    assert_eq!(view.file_identifier, id, "file identifier");
    let vtable = usize::try_from(root as i64 - i64::from(u32_at(b, root) as i32)).expect("vtable inside the buffer");
    let (vt_len, table_len) = (usize::from(u16_at(b, vtable)), usize::from(u16_at(b, vtable + 2)));
    assert!(vtable + vt_len <= b.len() && root + table_len <= b.len(), "vtable or table outside the buffer");
    assert_eq!(view.slots, (vt_len - 4) / 2, "slots");
    let present: Vec<(usize, u16)> =
        (0..view.slots).map(|slot| (slot, u16_at(b, vtable + 4 + 2 * slot))).filter(|&(_, off)| off != 0).collect();
    assert_eq!(view.fields.iter().map(|f| (f.slot, f.offset)).collect::<Vec<_>>(), present, "present fields");
    let mut strings = 0;
    for f in &view.fields {
        let end = present.iter().map(|&(_, o)| usize::from(o)).filter(|&o| o > usize::from(f.offset)).min();
        let end = end.unwrap_or(table_len);
        assert_eq!(usize::from(f.width), end - usize::from(f.offset), "width of field {}", f.slot);
        let at = root + usize::from(f.offset);
        let inline = &b[at..at + usize::from(f.width)];
        let value = (inline.len() <= 8).then(|| {
            let mut v = [0u8; 8];
            v[..inline.len()].copy_from_slice(inline);
            u64::from_le_bytes(v)
        });
        assert_eq!(f.value, value, "inline value of field {}", f.slot);
        let target = |what: &str| {
            assert!(f.width >= 4, "{what} of a {} B field", f.width);
            let target = at + usize::try_from(u32_at(b, at)).expect("a u32 fits usize");
            assert!(target % 4 == 0 && target + 4 <= b.len(), "{what} at {target} of a {} B buffer", b.len());
            target
        };
        if let Some(s) = &f.string {
            strings += 1;
            let t = target("string");
            let len = usize::try_from(u32_at(b, t)).expect("a u32 fits usize");
            let text = std::str::from_utf8(&b[t + 4..t + 4 + len]).expect("a string's bytes are UTF-8");
            assert_eq!(b[t + 4 + len], 0, "a string without its NUL");
            assert!(!text.is_empty() && !text.chars().any(char::is_control), "string {text:?} shown");
            let shown: String = text.chars().take(256).collect();
            let shown = if shown.len() < text.len() { format!("{shown}…") } else { shown };
            assert_eq!(s, &shown, "string of field {}", f.slot);
            assert_eq!(f.points_to, None, "a string field also shown as an offset");
        }
        if let Some(p) = f.points_to {
            assert_eq!(p, target("offset"), "offset target of field {}", f.slot);
        }
        if let Some(x) = f.float {
            assert!(x.is_normal() && (1e-6..1e12).contains(&x.abs()), "float {x} shown");
            assert!(matches!(f.width, 4 | 8), "a float of {} B", f.width);
        }
    }
    let json = view.to_json();
    assert_eq!(json["fields"].as_array().map(Vec::len), Some(view.fields.len()), "JSON fields");
    assert_eq!(view.lines().len(), 1 + view.fields.len(), "one text line per field");
    Run { viewed: true, fields: view.fields.len(), strings }
}
