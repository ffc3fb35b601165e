//! Bytes in memory another process may write at the same time (a ring slot of a best-effort or evicting writer).
//!
//! No `&[u8]` is ever made of them: a shared reference asserts that nothing changes the bytes while it lives, which
//! a lapping writer breaks, and the compiler may then load a byte twice and get two values (a bounds check passing
//! on one load and the index using another). [`SharedBytes`] only copies out (`sys::copy::copy_nonoverlapping`, which
//! avoids a slow case of `memcpy`) into memory this thread owns; whatever the copy holds stays put while it is used.
//! The copy may be torn (old and new bytes mixed): the owner of the memory tells afterwards whether it was (the
//! ring's slot sequence re-check).
//!
//! The bytes may also still be arriving (a ring sample read while it is written, [`Arriving`]): every copy first
//! waits until the bytes it takes are written.
#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::ptr::NonNull;

use super::copy::copy_nonoverlapping;

/// Bytes written from the start onwards while they are read: how far they are.
pub(crate) trait Arriving: Sync {
    /// Waits until at least the first `end` bytes are written and returns how many are (at least `end`). A write that
    /// stalls or is overwritten is given up: the result is then at least `end` all the same, the copy made after it
    /// is torn, and the owner of the bytes tells so afterwards.
    fn wait_for(&self, end: usize) -> usize;
}

/// `len` bytes at a fixed address, readable for `'a`, that another process may be writing meanwhile.
#[derive(Clone, Copy)]
pub(crate) struct SharedBytes<'a> {
    ptr: NonNull<u8>,
    len: usize,
    /// Set while the bytes are still being written in order (see [`Arriving`]).
    arriving: Option<&'a dyn Arriving>,
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
        SharedBytes { ptr, len, arriving: None, _mapping: PhantomData }
    }

    /// The same bytes, still being written in order: every copy waits for the bytes it takes.
    pub(crate) fn arriving(self, arriving: &'a dyn Arriving) -> SharedBytes<'a> {
        SharedBytes { arriving: Some(arriving), ..self }
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
        if let Some(a) = self.arriving {
            a.wait_for(end);
        }
        // SAFETY: `offset..end` lies inside the `len` bytes `new`'s caller promised readable for 'a; `dst` is memory
        // of this thread, distinct from the mapping (a `&mut [u8]` cannot alias bytes only other processes write),
        // so the ranges do not overlap. Concurrent writes by another process can make the copy torn, never invalid:
        // any byte value is a valid `u8`.
        unsafe { copy_nonoverlapping(self.ptr.as_ptr().add(offset), dst.as_mut_ptr(), dst.len()) };
        true
    }

    /// Appends all the bytes to `buf` (grown once to fit); bytes still arriving are copied as they come.
    pub(crate) fn append_to(&self, buf: &mut Vec<u8>) {
        buf.reserve(self.len);
        let start = buf.len();
        let mut done = 0;
        while done < self.len {
            let ready = self.arriving.map_or(self.len, |a| a.wait_for(done + 1).clamp(done + 1, self.len));
            // SAFETY: `reserve` made room for `len` more bytes after `start`, and `done < ready <= len`; the source
            // is readable for `len` bytes (see `new`) and does not overlap the vector's own allocation. Torn bytes
            // are still valid `u8`s.
            unsafe {
                copy_nonoverlapping(self.ptr.as_ptr().add(done), buf.as_mut_ptr().add(start + done), ready - done)
            };
            done = ready;
        }
        // SAFETY: the loop above initialised all `len` bytes after `start`.
        unsafe { buf.set_len(start + self.len) };
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

    /// Bytes that arrive in steps of 3 on each wait: copies ask for exactly what they take.
    struct Steps {
        written: std::sync::atomic::AtomicUsize,
        asked: std::sync::Mutex<Vec<usize>>,
    }

    impl Arriving for Steps {
        fn wait_for(&self, end: usize) -> usize {
            self.asked.lock().unwrap().push(end);
            let w = self.written.load(std::sync::atomic::Ordering::Relaxed);
            let now = if w >= end { w } else { end.max(w + 3) };
            self.written.store(now, std::sync::atomic::Ordering::Relaxed);
            now
        }
    }

    #[test]
    fn copies_of_arriving_bytes_wait_for_what_they_take() {
        let mut data: Vec<u8> = (0u8..10).collect();
        let steps = Steps { written: 0.into(), asked: Default::default() };
        let v = over(&mut data).arriving(&steps);
        let mut two = [0u8; 2];
        assert!(v.copy_range(4, &mut two));
        assert_eq!(two, [4, 5]);
        assert_eq!(*steps.asked.lock().unwrap(), [6], "waited for the end of the range");
        let mut buf = Vec::new();
        v.append_to(&mut buf);
        assert_eq!(buf, (0u8..10).collect::<Vec<_>>());
        // 6 were there: copied at once; then 9, then 10 (capped at the length).
        assert_eq!(*steps.asked.lock().unwrap(), [6, 1, 7, 10]);
        assert!(!v.copy_range(9, &mut two), "outside: no wait, no copy");
        assert_eq!(steps.asked.lock().unwrap().len(), 4);
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
