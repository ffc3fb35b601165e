//! A walk over protobuf wire-format bytes, field by field, without decoding or allocating: what the checks on a
//! registration sample before it is decoded use (`limits`, `repeat`).

fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(value);
        }
    }
    None
}

/// One field: number, wire type, its varint value (wire type 0), its payload (wire type 2), and all its bytes.
pub(super) struct Field<'a> {
    pub(super) number: u64,
    pub(super) wire_type: u64,
    pub(super) value: u64,
    pub(super) payload: &'a [u8],
    pub(super) raw: &'a [u8],
}

/// The next field of `buf`, advancing it; `None` at the end, `Some(None)` on malformed bytes.
pub(super) fn next_field<'a>(buf: &mut &'a [u8]) -> Option<Option<Field<'a>>> {
    if buf.is_empty() {
        return None;
    }
    let start = *buf;
    let field = (|| {
        let key = varint(buf)?;
        let (mut value, mut payload) = (0, &[][..]);
        match key & 7 {
            0 => value = varint(buf)?,
            1 => *buf = buf.get(8..)?,
            5 => *buf = buf.get(4..)?,
            2 => {
                let len = usize::try_from(varint(buf)?).ok()?;
                payload = buf.get(..len)?;
                *buf = buf.get(len..)?;
            }
            _ => return None,
        }
        let raw = &start[..start.len() - buf.len()];
        Some(Field { number: key >> 3, wire_type: key & 7, value, payload, raw })
    })();
    Some(field)
}
