//! Bytes in memory another process may write at the same time (a ring slot of a best-effort or evicting writer).
//!
//! No `&[u8]` is ever made of them: a shared reference asserts that nothing changes the bytes while it lives, which
//! a lapping writer breaks, and the compiler may then load a byte twice and get two values (a bounds check passing
//! on one load and the index using another). [`SharedBytes`] only copies out, with `ptr::copy_nonoverlapping`, into
//! memory this thread owns; whatever the copy holds stays put while it is used. The copy may be torn (old and new
//! bytes mixed): the owner of the memory tells afterwards whether it was (the ring's slot sequence re-check).
#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::ptr::NonNull;

/// `len` bytes at a fixed address, readable for `'a`, that another process may be writing meanwhile.
#[derive(Clone, Copy)]
pub(crate) struct SharedBytes<'a> {
    ptr: NonNull<u8>,
    len: usize,
    /// Borrows the mapping for `'a` (it must stay mapped) without claiming the bytes are immutable.
    _mapping: PhantomData<&'a ()>,
}

// SAFETY: a `SharedBytes` only reads, by copying, from memory that stays mapped for `'a`; which thread copies makes no
// difference (the bytes are written by another process, never through this type).
unsafe impl Send for SharedBytes<'_> {}
// SAFETY: as for `Send`: `&SharedBytes` allows nothing but copying reads.
unsafe impl Sync for SharedBytes<'_> {}

impl<'a> SharedBytes<'a> {
    /// # Safety
    ///
    /// `ptr` must be valid for reads of `len` bytes for all of `'a` (mapped, inside one allocation or mapping, not
    /// unmapped before `'a` ends). Other processes may write the bytes; this process must not write them through a
    /// reference while `'a` lasts (only through raw pointers or not at all).
    pub(crate) unsafe fn new(ptr: NonNull<u8>, len: usize) -> SharedBytes<'a> {
        SharedBytes { ptr, len, _mapping: PhantomData }
    }

    /// Number of bytes.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Copies the bytes `offset..offset + dst.len()` into `dst`; false (nothing copied) if that range is not inside.
    #[inline]
    pub(crate) fn copy_range(&self, offset: usize, dst: &mut [u8]) -> bool {
        let Some(end) = offset.checked_add(dst.len()) else { return false };
        if end > self.len {
            return false;
        }
        // SAFETY: `offset..end` lies inside the `len` bytes `new`'s caller promised readable for 'a; `dst` is memory
        // of this thread, distinct from the mapping (a `&mut [u8]` cannot alias bytes only other processes write),
        // so the ranges do not overlap. Concurrent writes by another process can make the copy torn, never invalid:
        // any byte value is a valid `u8`.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), dst.as_mut_ptr(), dst.len()) };
        true
    }

    /// Appends all the bytes to `buf` (grown once to fit).
    pub(crate) fn append_to(&self, buf: &mut Vec<u8>) {
        buf.reserve(self.len);
        let start = buf.len();
        // SAFETY: `reserve` made room for `len` more bytes after `start`; the source is readable for `len` bytes
        // (see `new`) and does not overlap the vector's own allocation. Torn bytes are still valid `u8`s.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), buf.as_mut_ptr().add(start), self.len);
            buf.set_len(start + self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn over(bytes: &mut [u8]) -> SharedBytes<'_> {
        let ptr = NonNull::new(bytes.as_mut_ptr()).expect("non-null");
        // SAFETY: the test's buffer outlives the view and is only written before it is made.
        unsafe { SharedBytes::new(ptr, bytes.len()) }
    }

    #[test]
    fn copies_ranges_and_refuses_outside() {
        let mut data: Vec<u8> = (0u8..32).collect();
        let v = over(&mut data);
        assert_eq!(v.len(), 32);
        let mut four = [0u8; 4];
        assert!(v.copy_range(28, &mut four));
        assert_eq!(four, [28, 29, 30, 31]);
        assert!(!v.copy_range(29, &mut four), "range past the end");
        assert_eq!(four, [28, 29, 30, 31], "untouched on refusal");
        assert!(!v.copy_range(usize::MAX, &mut four), "offset overflow");
        assert!(v.copy_range(32, &mut []), "empty range at the end");
        let mut buf = vec![9u8];
        v.append_to(&mut buf);
        assert_eq!(buf.len(), 33);
        assert_eq!(buf[0], 9);
        assert_eq!(&buf[1..], &(0u8..32).collect::<Vec<_>>()[..]);
    }

    #[test]
    fn empty() {
        let mut data: [u8; 0] = [];
        let v = over(&mut data);
        let mut buf = Vec::new();
        v.append_to(&mut buf);
        assert!(buf.is_empty());
        assert!(v.copy_range(0, &mut []));
    }
}
