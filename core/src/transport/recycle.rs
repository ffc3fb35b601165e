//! Buffers of received messages that go back to their receiver when the last sample holding them is dropped, so
//! that the next message of about their size reuses memory already mapped (no page faults, no zeroing by the
//! kernel): the UDP layer's reassembled messages and the TCP layer's received payloads. At most
//! [`SPARE_BUFFERS`] of [`SPARE_MIN_BYTES`](crate::wire::reassembly::SPARE_MIN_BYTES)..=
//! [`SPARE_MAX_BYTES`](crate::wire::reassembly::SPARE_MAX_BYTES) bytes, and
//! [`SPARE_BYTES`](crate::wire::reassembly::SPARE_BYTES) in all, wait to be taken back (the largest kept,
//! [`keep_spare`](crate::wire::reassembly::keep_spare)); a receiver that is gone frees them.

use std::sync::{Arc, Mutex, Weak};

pub(crate) use crate::wire::reassembly::worth_keeping;

use crate::sync::lock;

/// A receiver's buffers handed back by dropped samples.
#[derive(Debug, Default)]
pub(crate) struct Returned(Arc<Mutex<Vec<Vec<u8>>>>);

impl Returned {
    /// `v` as shared bytes, handed back here when the last of them is dropped if its capacity is worth keeping.
    pub(crate) fn bytes(&self, v: Vec<u8>) -> bytes::Bytes {
        if worth_keeping(v.capacity()) {
            bytes::Bytes::from_owner(Recycled { buf: v, back: Arc::downgrade(&self.0) })
        } else {
            bytes::Bytes::from(v)
        }
    }

    /// Takes the buffers handed back so far, unless a sample is handing one back right now (then next time).
    pub(crate) fn take(&self) -> Vec<Vec<u8>> {
        self.0.try_lock().map(|mut b| std::mem::take(&mut *b)).unwrap_or_default()
    }
}

/// A received message's buffer, handed back to `back` when dropped.
struct Recycled {
    buf: Vec<u8>,
    back: Weak<Mutex<Vec<Vec<u8>>>>,
}

impl AsRef<[u8]> for Recycled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Recycled {
    fn drop(&mut self) {
        if let Some(back) = self.back.upgrade() {
            crate::wire::reassembly::keep_spare(&mut lock(&back), std::mem::take(&mut self.buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::reassembly::{SPARE_BUFFERS, SPARE_MIN_BYTES};

    /// A buffer goes back when the last piece of it is dropped, at most `SPARE_BUFFERS` of them; a small one, or
    /// one whose receiver is gone, is simply freed.
    #[test]
    fn a_buffer_goes_back_when_its_last_sample_is_dropped() {
        let returned = Returned::default();
        let big = || {
            let mut v = Vec::with_capacity(SPARE_MIN_BYTES * 2);
            v.extend_from_slice(&[7u8; 100]);
            v
        };
        let b = returned.bytes(big());
        let part = b.slice(10..20);
        drop(b);
        assert!(returned.take().is_empty(), "a slice still holds it");
        assert_eq!(&part[..], &[7u8; 10]);
        drop(part);
        assert_eq!(returned.take().len(), 1);
        for _ in 0..SPARE_BUFFERS + 2 {
            drop(returned.bytes(big()));
        }
        assert_eq!(returned.take().len(), SPARE_BUFFERS, "bounded");
        drop(returned.bytes(vec![1u8; 100]));
        assert!(returned.take().is_empty(), "small buffers are not kept");
        let kept = returned.bytes(big());
        drop(returned);
        drop(kept);
    }
}
