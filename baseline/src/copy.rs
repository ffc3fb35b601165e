//! The rings' payload copies, with the guard shoal's copies have (`shoal`'s `sys::copy`): glibc copies 2 KiB to
//! 512 KiB with `rep movsb`, which on the AMD EPYC hosts shoal is measured on runs about twelve times slower when the
//! destination lies 1 to 31 bytes past the source modulo 4096 (a payload at a page boundary copied into a `Vec` of the
//! C library's large allocations, at page offset 16, is such a copy). Such a copy goes in pieces of [`PIECE`] bytes,
//! which glibc copies with its vector loop. Without the guard a reference ring would lose to shoal by that accident,
//! not by design (the streamed warm ring's reader did: 1 MiB ping-pong 116-206 µs against 55-69 µs unstreamed).

/// A copy whose destination is `1..ALIASED` bytes past its source modulo 4096 goes in pieces (shoal's value).
pub const ALIASED: usize = 32;
/// Bytes per piece of such a copy (shoal's value).
pub const PIECE: usize = 1024;

fn aliased(dst: *const u8, src: *const u8, len: usize) -> bool {
    let distance = (dst as usize).wrapping_sub(src as usize) & 4095;
    len > PIECE && distance != 0 && distance < ALIASED
}

/// `dst.copy_from_slice(src)`, in pieces at a slow distance (panics, as `copy_from_slice` does, when the lengths
/// differ).
pub fn copy_from(dst: &mut [u8], src: &[u8]) {
    if dst.len() == src.len() && aliased(dst.as_ptr(), src.as_ptr(), src.len()) {
        for (d, s) in dst.chunks_mut(PIECE).zip(src.chunks(PIECE)) {
            std::hint::black_box(d).copy_from_slice(s);
        }
    } else {
        dst.copy_from_slice(src);
    }
}

/// `buf.extend_from_slice(src)`, in pieces at a slow distance.
pub fn extend(buf: &mut Vec<u8>, src: &[u8]) {
    buf.reserve(src.len());
    if aliased(buf.as_ptr().wrapping_add(buf.len()), src.as_ptr(), src.len()) {
        for s in src.chunks(PIECE) {
            buf.extend_from_slice(std::hint::black_box(s));
        }
    } else {
        buf.extend_from_slice(src);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_byte_at_every_distance() {
        let src: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        for off in [0, 1, 16, 31, 32] {
            for len in [0, 1, PIECE + 1, 20_000] {
                let mut buf = vec![0u8; 20_000 + 64];
                copy_from(&mut buf[off..off + len], &src[..len]);
                assert_eq!(&buf[off..off + len], &src[..len]);
                let mut v = vec![7u8; off];
                extend(&mut v, &src[..len]);
                assert_eq!(&v[off..], &src[..len]);
            }
        }
        assert!(aliased(16 as *const u8, std::ptr::null(), 4096));
        assert!(!aliased(32 as *const u8, std::ptr::null(), 4096));
    }
}
