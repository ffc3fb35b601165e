//! A FlatBuffers payload viewed without its schema. eCAL 6.1.1's FlatBuffers publishers and shoal's (planus)
//! announce no schema, so all that can be shown is the buffer's structure: the file identifier, the root table's
//! fields (which slots are present, where and how wide), and for 4-byte fields that point at a string, the string.
//! Every offset is checked against the buffer; a buffer that does not parse is reported, never trusted.

use serde_json::{Value, json};

/// One present field of the root table.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Field {
    /// The field's slot (its id in the schema, in declaration order).
    pub(crate) slot: usize,
    /// Offset inside the table.
    pub(crate) offset: u16,
    /// Inline bytes up to the next field (an upper bound of the field's width: padding follows some fields).
    pub(crate) width: u16,
    /// The inline bytes, little-endian, when at most 8.
    pub(crate) value: Option<u64>,
    /// For 4-byte fields pointing at a non-empty UTF-8 string: the string (cut to 256 characters).
    pub(crate) string: Option<String>,
    /// For 4-byte fields that could be an offset (to a string, vector or table): the buffer position it points at.
    pub(crate) points_to: Option<usize>,
    /// The inline bytes read as a float (4 or 8 bytes), when that gives an ordinary number.
    pub(crate) float: Option<f64>,
}

/// The structure of a FlatBuffers buffer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct View {
    /// The 4 bytes after the root offset when they are printable ASCII (a `file_identifier`, if the schema has one).
    pub(crate) file_identifier: Option<String>,
    /// Where the root table starts.
    pub(crate) root: usize,
    /// Slots in the root table's vtable.
    pub(crate) slots: usize,
    /// Present fields, by slot.
    pub(crate) fields: Vec<Field>,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// Parses the buffer's root table; `Err` says why the bytes are not a FlatBuffer.
pub(crate) fn view(b: &[u8]) -> Result<View, String> {
    let root = usize::try_from(u32_at(b, 0).ok_or("shorter than a root offset")?).map_err(|e| e.to_string())?;
    if root < 4 || root.checked_add(4).is_none_or(|end| end > b.len()) {
        return Err(format!("root offset {root} outside the {} B buffer", b.len()));
    }
    let file_identifier = (root >= 8)
        .then(|| b.get(4..8))
        .flatten()
        .filter(|id| id.iter().all(|c| c.is_ascii_graphic()))
        .map(|id| String::from_utf8_lossy(id).into_owned());
    let soffset = i64::from(u32_at(b, root).ok_or("root table truncated")? as i32);
    let vtable = i64::try_from(root).map_err(|e| e.to_string())? - soffset;
    let vtable = usize::try_from(vtable).map_err(|_| format!("vtable offset {vtable} before the buffer"))?;
    let vt_len = usize::from(u16_at(b, vtable).ok_or("vtable outside the buffer")?);
    let table_len = usize::from(u16_at(b, vtable + 2).ok_or("vtable truncated")?);
    if vt_len < 4 || vt_len % 2 != 0 || vtable + vt_len > b.len() {
        return Err(format!("vtable size {vt_len} at {vtable} is not valid"));
    }
    if table_len < 4 || root + table_len > b.len() {
        return Err(format!("table size {table_len} at {root} does not fit"));
    }
    let slots = (vt_len - 4) / 2;
    let mut present: Vec<(usize, u16)> = Vec::new();
    for slot in 0..slots {
        let off = u16_at(b, vtable + 4 + 2 * slot).ok_or("vtable truncated")?;
        if off == 0 {
            continue;
        }
        if usize::from(off) < 4 || usize::from(off) >= table_len {
            return Err(format!("field {slot} at offset {off} outside its {table_len} B table"));
        }
        present.push((slot, off));
    }
    let mut by_offset: Vec<u16> = present.iter().map(|&(_, o)| o).collect();
    by_offset.sort_unstable();
    let table_end = u16::try_from(table_len).unwrap_or(u16::MAX);
    let fields = present
        .into_iter()
        .map(|(slot, offset)| {
            let next = by_offset.iter().copied().find(|&o| o > offset).unwrap_or(table_end);
            let width = next - offset;
            let at = root + usize::from(offset);
            let value = (width <= 8).then(|| {
                let mut v = [0u8; 8];
                let n = usize::from(width);
                v[..n].copy_from_slice(&b[at..at + n]);
                u64::from_le_bytes(v)
            });
            let string = if width >= 4 { string_at(b, at) } else { None };
            let points_to = if width >= 4 && string.is_none() { offset_target(b, at) } else { None };
            let float = match (width, value) {
                (4, Some(v)) => plausible(f64::from(f32::from_bits(v as u32))),
                (8, Some(v)) => plausible(f64::from_bits(v)),
                _ => None,
            };
            Field { slot, offset, width, value, string, points_to, float }
        })
        .collect();
    Ok(View { file_identifier, root, slots, fields })
}

/// A float that looks like a value rather than reinterpreted integer bits.
fn plausible(x: f64) -> Option<f64> {
    (x.is_normal() && (1e-6..1e12).contains(&x.abs())).then_some(x)
}

/// Where a uoffset at `at` points, if that is inside the buffer (after the field, 4-aligned, room for a length).
fn offset_target(b: &[u8], at: usize) -> Option<usize> {
    let off = usize::try_from(u32_at(b, at)?).ok()?;
    let target = at.checked_add(off)?;
    (off >= 4 && target % 4 == 0 && target.checked_add(4)? <= b.len()).then_some(target)
}

/// The string a uoffset at `at` points to, if it is one: a length, that many UTF-8 bytes and a NUL.
fn string_at(b: &[u8], at: usize) -> Option<String> {
    let target = offset_target(b, at)?;
    let len = usize::try_from(u32_at(b, target)?).ok()?;
    if len == 0 {
        return None;
    }
    let start = target.checked_add(4)?;
    let bytes = b.get(start..start.checked_add(len)?)?;
    if *b.get(start + len)? != 0 {
        return None;
    }
    let s = std::str::from_utf8(bytes).ok()?;
    if s.chars().any(|c| c.is_control()) {
        return None;
    }
    let mut cut: String = s.chars().take(256).collect();
    if cut.len() < s.len() {
        cut.push('…');
    }
    Some(cut)
}

impl View {
    pub(crate) fn to_json(&self) -> Value {
        let fields: Vec<Value> = self
            .fields
            .iter()
            .map(|f| {
                let mut v = json!({"slot": f.slot, "offset": f.offset, "width": f.width});
                if let Some(x) = f.value {
                    v["value_le"] = json!(x);
                }
                if let Some(s) = &f.string {
                    v["string"] = json!(s);
                }
                if let Some(p) = f.points_to {
                    v["offset_to"] = json!(p);
                }
                if let Some(x) = f.float {
                    v["as_float"] = json!(x);
                }
                v
            })
            .collect();
        json!({"file_identifier": self.file_identifier, "root_offset": self.root, "slots": self.slots,
               "fields": fields})
    }

    /// Readable lines.
    pub(crate) fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "flatbuffers root table (no schema announced: field names and types unknown): {} of {} slots present{}",
            self.fields.len(),
            self.slots,
            self.file_identifier.as_ref().map_or(String::new(), |id| format!(", file identifier {id:?}"))
        )];
        for f in &self.fields {
            let mut s = format!("  field {}: {} B at +{}", f.slot, f.width, f.offset);
            if let Some(v) = f.value {
                s.push_str(&format!(", value {v} (0x{v:x}, little-endian)"));
            }
            if let Some(x) = f.float {
                s.push_str(&format!(", as float {x}"));
            }
            if let Some(st) = &f.string {
                s.push_str(&format!(", string {st:?}"));
            }
            if let Some(p) = f.points_to {
                s.push_str(&format!(", or an offset to byte {p} (a vector or table)"));
            }
            out.push(s);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer with a root table of 3 slots: slot 0 a u32 (7), slot 1 absent, slot 2 a string "hi".
    fn sample() -> Vec<u8> {
        let mut b = vec![0u8; 44];
        b[0..4].copy_from_slice(&20u32.to_le_bytes()); // root table at 20
        b[4..8].copy_from_slice(b"TEST");
        // vtable at 8: size 10 (3 slots), table size 12, offsets 4, 0, 8
        for (i, v) in [10u16, 12, 4, 0, 8].iter().enumerate() {
            b[8 + 2 * i..10 + 2 * i].copy_from_slice(&v.to_le_bytes());
        }
        b[20..24].copy_from_slice(&12i32.to_le_bytes()); // soffset: vtable = 20 - 12
        b[24..28].copy_from_slice(&7u32.to_le_bytes());
        b[28..32].copy_from_slice(&4u32.to_le_bytes()); // string at 32
        b[32..36].copy_from_slice(&2u32.to_le_bytes());
        b[36..38].copy_from_slice(b"hi");
        b
    }

    #[test]
    fn reads_root_table_fields() {
        let v = view(&sample()).unwrap();
        assert_eq!(v.file_identifier.as_deref(), Some("TEST"));
        assert_eq!(v.slots, 3);
        assert_eq!(v.fields.len(), 2);
        assert_eq!((v.fields[0].slot, v.fields[0].value), (0, Some(7)));
        assert_eq!((v.fields[1].slot, v.fields[1].string.as_deref()), (2, Some("hi")));
        assert!(v.lines()[2].contains("string \"hi\""), "{:?}", v.lines());
    }

    #[test]
    fn garbage_is_an_error_never_a_panic() {
        let good = sample();
        assert!(view(&[]).is_err());
        assert!(view(&[0xff; 3]).is_err());
        assert!(view(&[0xff; 64]).is_err());
        for cut in 0..good.len() {
            let _ = view(&good[..cut]);
        }
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let mut b = good.clone();
            for _ in 0..3 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x as usize) % b.len();
                b[i] = (x >> 32) as u8;
            }
            let _ = view(&b);
        }
    }
}
