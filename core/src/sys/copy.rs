//! Payload copies that avoid a slow case of the C library's `memcpy`, which every payload copy of shoal goes through
//! (`copy_from_slice`, `ptr::copy_nonoverlapping`).
//!
//! glibc copies 2 KiB to 512 KiB with `rep movsb` on CPUs with fast strings. On the AMD EPYC hosts shoal is measured
//! on, a `rep movsb` whose destination lies 1 to 31 bytes past its source modulo 4096 runs about twelve times slower:
//! 1 MiB copied in 16 KiB calls took 348-363 µs at those distances and 27-36 µs at every other distance from -64 to
//! 80, while 1 MiB in one call (glibc's vector loop above 512 KiB) took 28 µs at any distance. A reader copying a
//! payload at page offset 0 into a `Vec` of the C library's large allocations (page offset 16) lands exactly there,
//! as do the parts of a streamed ring write (`shm_ring`). A copy at such a distance therefore goes in pieces of
//! [`PIECE`] bytes, below every `rep movsb` threshold glibc sets, which it copies with its vector loop at any distance
//! (1 MiB: 35-40 µs).

/// A copy whose destination is `1..ALIASED` bytes past its source modulo 4096 goes in pieces.
pub(crate) const ALIASED: usize = 32;
/// Bytes per piece of such a copy.
pub(crate) const PIECE: usize = 1024;

/// Whether a copy of `len` bytes from `src` to `dst` is one that `rep movsb` runs slowly (see the module doc).
#[inline]
pub(crate) fn aliased(dst: *const u8, src: *const u8, len: usize) -> bool {
    let distance = (dst as usize).wrapping_sub(src as usize) & 4095;
    len > PIECE && distance != 0 && distance < ALIASED
}

/// `dst.copy_from_slice(src)`, in pieces at a distance [`aliased`] names (panics, as `copy_from_slice` does, when the
/// lengths differ).
#[inline]
pub(crate) fn copy_from(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_from: destination and source lengths differ");
    // SAFETY: both slices hold `src.len()` bytes; a `&mut [u8]` and a `&[u8]` never overlap.
    unsafe { copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), src.len()) };
}

/// `ptr::copy_nonoverlapping(src, dst, len)`, in pieces at a distance [`aliased`] names.
///
/// # Safety
///
/// As for `ptr::copy_nonoverlapping`: `src` readable and `dst` writable for `len` bytes, the two not overlapping.
#[inline]
pub(crate) unsafe fn copy_nonoverlapping(src: *const u8, dst: *mut u8, len: usize) {
    if !aliased(dst, src, len) {
        // SAFETY: the caller's promise.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    let mut done = 0;
    while done < len {
        let n = PIECE.min(len - done);
        // SAFETY: `done + n <= len`: inside both ranges the caller promised. Each piece its own call (`black_box`):
        // the optimiser must not merge them back into one copy.
        unsafe { std::ptr::copy_nonoverlapping(src.add(done), std::hint::black_box(dst.add(done)), n) };
        done += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_slow_distances_only() {
        let base = 0x10_0000usize as *const u8;
        let at = |off: usize| base.wrapping_add(off);
        assert!(aliased(at(16), at(0), 16 << 10));
        assert!(aliased(at(4096 + 31), at(0), 16 << 10), "modulo 4096");
        assert!(!aliased(at(32), at(0), 16 << 10));
        assert!(!aliased(at(0), at(16), 16 << 10), "the source past the destination is not slow");
        assert!(!aliased(at(4096), at(0), 16 << 10), "distance 0");
        assert!(!aliased(at(16), at(0), PIECE), "short copies take the vector loop anyway");
    }

    #[test]
    fn copies_every_byte_at_every_distance() {
        let src: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let mut buf = vec![0u8; 20_000 + 4096];
        for off in [0, 1, 16, 31, 32, 4095] {
            for len in [0, 1, PIECE, PIECE + 1, 5000, 20_000] {
                buf.fill(0);
                copy_from(&mut buf[off..off + len], &src[..len]);
                assert_eq!(&buf[off..off + len], &src[..len], "off {off} len {len}");
                assert!(buf[..off].iter().chain(&buf[off + len..]).all(|&b| b == 0), "off {off} len {len}");
            }
        }
    }
}
