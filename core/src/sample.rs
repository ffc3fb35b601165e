//! Received samples: the owned [`Sample`] and the zero-copy [`SampleRef`] with its [`PayloadView`], shared by the
//! transports (which deliver them) and the public API (which hands them out), so it sits below both.

use std::sync::Arc;

use crate::stats::Via;
use crate::sys::shared_bytes::SharedBytes;
use crate::types::TypeInfo;

/// Bytes of a received sample: shared with other same-process subscribers, owned, or a range of a received buffer
/// (the UDP layer's datagram or reassembled message, shared by every subscriber it goes to, never copied).
#[derive(Debug, Clone)]
pub(crate) enum Payload {
    Shared(Arc<[u8]>),
    Owned(Vec<u8>),
    /// A range of a larger buffer, which it keeps alive: `held` is its share of that buffer (at least its own
    /// length), set by the layer that cut it so that the shares of the samples one subscriber gets from one buffer
    /// add up to the whole buffer.
    Bytes {
        bytes: bytes::Bytes,
        held: usize,
    },
}

impl Payload {
    fn as_slice(&self) -> &[u8] {
        match self {
            Payload::Shared(a) => a,
            Payload::Owned(v) => v,
            Payload::Bytes { bytes, .. } => bytes,
        }
    }

    /// The memory this payload keeps alive, which a subscriber's queue charges it
    /// ([`QueuePolicy::charge`](crate::config::QueuePolicy::charge)): a slice of a larger buffer counts for its share
    /// of that buffer, not its length, so a queue's byte budget bounds what its samples hold.
    pub(crate) fn held(&self) -> usize {
        match self {
            Payload::Shared(a) => a.len(),
            Payload::Owned(v) => v.capacity(),
            Payload::Bytes { bytes, held } => (*held).max(bytes.len()),
        }
    }
}

/// The metadata accessors [`Sample`] and [`SampleRef`] share (same fields in both).
macro_rules! sample_metadata {
    () => {
        /// Send time stamped by the publisher, in µs since the UNIX epoch (eCAL's unit).
        pub fn send_time_us(&self) -> i64 {
            self.send_time_ns.div_euclid(1000)
        }

        /// Send time stamped by the publisher, in ns since the UNIX epoch (µs precision from eCAL's layers).
        pub fn send_time_ns(&self) -> i64 {
            self.send_time_ns
        }

        /// How the sample reached this subscriber.
        pub fn via(&self) -> Via {
            self.via
        }

        /// The publisher's message counter: 1 for its first message, +1 for each one after.
        pub fn clock(&self) -> u64 {
            self.clock
        }

        /// The publisher's entity id (as in its registration's `topic_id`).
        pub fn publisher_id(&self) -> u64 {
            self.publisher_id
        }
    };
}

/// A received message with its metadata; owns (or shares) its payload.
#[derive(Debug, Clone)]
pub struct Sample {
    pub(crate) payload: Payload,
    /// Send time stamped by the publisher, ns since the UNIX epoch (µs × 1000 from eCAL layers).
    pub(crate) send_time_ns: i64,
    /// How it arrived.
    pub(crate) via: Via,
    pub(crate) clock: u64,
    pub(crate) publisher_id: u64,
    pub(crate) type_info: Arc<TypeInfo>,
    pub(crate) topic: Arc<str>,
}

impl Sample {
    /// The message bytes.
    pub fn payload(&self) -> &[u8] {
        self.payload.as_slice()
    }

    sample_metadata!();

    /// The publisher's type information.
    pub fn type_info(&self) -> &TypeInfo {
        &self.type_info
    }

    /// The topic name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// A borrowed view of this sample, as `recv_with` closures get it.
    pub(crate) fn view(&self) -> SampleRef<'_> {
        SampleRef {
            payload: PayloadView::stable(self.payload()),
            send_time_ns: self.send_time_ns,
            via: self.via,
            clock: self.clock,
            publisher_id: self.publisher_id,
            type_info: &self.type_info,
            topic: &self.topic,
        }
    }

    /// Takes the payload out as a `Vec` (copies only when it is shared).
    pub fn into_payload(self) -> Vec<u8> {
        match self.payload {
            Payload::Owned(v) => v,
            Payload::Shared(a) => a.to_vec(),
            Payload::Bytes { bytes, .. } => Vec::from(bytes),
        }
    }
}

/// The payload of a [`SampleRef`]: either bytes that stay put while the view lives, or a shared-memory slot that
/// the publisher may overwrite meanwhile, which is only ever copied out of.
///
/// A sample from a ring (another shoal process on this host, [`Via::ShoalRing`]) is read in place in the
/// publisher's slot. No `&[u8]` of that slot is handed out, because nothing keeps the bytes still while the view
/// lives: a best-effort publisher laps slow readers, and a reliable one takes a reader that holds a slot longer than
/// its flow-control timeout out of flow control and then overwrites the slot. The reads below copy the bytes into
/// memory of the caller; a copy made while the slot was being overwritten may be torn (old and new bytes mixed), and
/// [`Subscriber::recv_with`](crate::Subscriber::recv_with) then discards the closure's result and counts a drop, so
/// a torn copy never outlives the closure unnoticed. Code run on a view must therefore not trust the bytes: no
/// panics on malformed input, no side effects that cannot be undone.
///
/// Every other sample (same process, eCAL shared memory, UDP, TCP: already copied into this process's memory) is
/// stable, and [`as_slice`](Self::as_slice) lends its bytes directly.
#[derive(Clone, Copy)]
pub struct PayloadView<'a>(Bytes<'a>);

#[derive(Clone, Copy)]
enum Bytes<'a> {
    Stable(&'a [u8]),
    Shared(SharedBytes<'a>),
}

impl<'a> PayloadView<'a> {
    /// A view of bytes that do not change while it lives.
    pub(crate) fn stable(bytes: &'a [u8]) -> PayloadView<'a> {
        PayloadView(Bytes::Stable(bytes))
    }

    /// A view of bytes another process may write meanwhile (a ring slot).
    pub(crate) fn shared(bytes: SharedBytes<'a>) -> PayloadView<'a> {
        PayloadView(Bytes::Shared(bytes))
    }

    /// Payload length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        match self.0 {
            Bytes::Stable(b) => b.len(),
            Bytes::Shared(b) => b.len(),
        }
    }

    /// Whether the payload is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes in place, when nothing can change them while the view lives (not for ring samples; see the type's
    /// documentation). Code that needs a slice either way uses [`slice_or_copy`](Self::slice_or_copy).
    #[inline]
    pub fn as_slice(&self) -> Option<&'a [u8]> {
        match self.0 {
            Bytes::Stable(b) => Some(b),
            Bytes::Shared(_) => None,
        }
    }

    /// The bytes as one slice: in place when [`as_slice`](Self::as_slice) allows it, else copied into `scratch`
    /// (cleared first; reuse it across messages to copy without allocating).
    #[inline]
    pub fn slice_or_copy<'s>(&self, scratch: &'s mut Vec<u8>) -> &'s [u8]
    where
        'a: 's,
    {
        match self.0 {
            Bytes::Stable(b) => b,
            Bytes::Shared(b) => {
                scratch.clear();
                b.append_to(scratch);
                scratch
            }
        }
    }

    /// Copies the bytes `offset..offset + dst.len()` into `dst`; false (and `dst` untouched) when that range is not
    /// inside the payload.
    #[inline]
    pub fn copy_range(&self, offset: usize, dst: &mut [u8]) -> bool {
        match self.0 {
            Bytes::Stable(b) => match offset.checked_add(dst.len()).and_then(|end| b.get(offset..end)) {
                Some(src) => {
                    dst.copy_from_slice(src);
                    true
                }
                None => false,
            },
            Bytes::Shared(b) => b.copy_range(offset, dst),
        }
    }

    /// Copies as many bytes as fit into `dst`, starting at `offset` (like `pread`); returns how many were copied
    /// (0 at or past the end).
    #[inline]
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> usize {
        let n = self.len().saturating_sub(offset).min(dst.len());
        // `offset..offset + n` is inside the payload whenever n > 0.
        if n == 0 || !self.copy_range(offset, &mut dst[..n]) {
            return 0;
        }
        n
    }

    /// The `N` bytes at `offset` (a header, a length, a counter), or `None` when the payload is too short.
    #[inline]
    pub fn read_array<const N: usize>(&self, offset: usize) -> Option<[u8; N]> {
        let mut a = [0u8; N];
        self.copy_range(offset, &mut a).then_some(a)
    }

    /// Copies the whole payload into `dst`, whose length must be [`len`](Self::len); false (and `dst` untouched)
    /// otherwise.
    #[inline]
    pub fn copy_to_slice(&self, dst: &mut [u8]) -> bool {
        dst.len() == self.len() && self.copy_range(0, dst)
    }

    /// Appends the whole payload to `buf`.
    #[inline]
    pub fn extend_vec(&self, buf: &mut Vec<u8>) {
        match self.0 {
            Bytes::Stable(b) => buf.extend_from_slice(b),
            Bytes::Shared(b) => b.append_to(buf),
        }
    }

    /// Copies the payload into a new `Vec`.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        self.extend_vec(&mut v);
        v
    }
}

impl std::fmt::Debug for PayloadView<'_> {
    /// Length and kind only: printing a shared slot's bytes would read them outside the caller's control.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PayloadView").field("len", &self.len()).field("stable", &self.as_slice().is_some()).finish()
    }
}

/// A zero-copy view of a received message: the payload may be read straight from a shared-memory slot.
///
/// Given to the closure of [`Subscriber::recv_with`](crate::Subscriber::recv_with). The slot is checked after the
/// closure returns: if the publisher overwrote it meanwhile, the closure's result is discarded and counted as a drop.
/// The payload is a [`PayloadView`] (read by copying; in place only when the bytes are stable).
#[derive(Debug, Clone, Copy)]
pub struct SampleRef<'a> {
    pub(crate) payload: PayloadView<'a>,
    pub(crate) send_time_ns: i64,
    pub(crate) via: Via,
    pub(crate) clock: u64,
    pub(crate) publisher_id: u64,
    pub(crate) type_info: &'a Arc<TypeInfo>,
    pub(crate) topic: &'a Arc<str>,
}

impl<'a> SampleRef<'a> {
    /// The message bytes, as a view that reads them in place without claiming they stay put.
    pub fn payload(&self) -> PayloadView<'a> {
        self.payload
    }

    sample_metadata!();

    /// The publisher's type information.
    pub fn type_info(&self) -> &'a TypeInfo {
        self.type_info.as_ref()
    }

    /// The topic name.
    pub fn topic(&self) -> &'a str {
        self.topic.as_ref()
    }

    /// Copies the view into an owned [`Sample`].
    pub fn to_owned_sample(&self) -> Sample {
        Sample {
            payload: Payload::Owned(self.payload.to_vec()),
            send_time_ns: self.send_time_ns,
            via: self.via,
            clock: self.clock,
            publisher_id: self.publisher_id,
            type_info: Arc::clone(self.type_info),
            topic: Arc::clone(self.topic),
        }
    }
}

/// Now, in ns since the UNIX epoch (the clock publishers stamp send times with; eCAL's unit is its µs).
#[inline]
pub(crate) fn now_ns() -> i64 {
    crate::sys::wall_clock::now_ns()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_view_lends_and_copies() {
        let bytes: Vec<u8> = (0u8..20).collect();
        let p = PayloadView::stable(&bytes);
        assert_eq!((p.len(), p.is_empty()), (20, false));
        assert_eq!(p.as_slice(), Some(&bytes[..]));
        let mut scratch = vec![9];
        assert!(std::ptr::eq(p.slice_or_copy(&mut scratch), &bytes[..]), "lent in place, not copied");
        assert_eq!(scratch, [9], "scratch untouched");
        assert_eq!(p.read_array::<3>(17), Some([17, 18, 19]));
        assert_eq!(p.read_array::<3>(18), None);
        assert_eq!(p.read_array::<1>(usize::MAX), None);
        let mut dst = [0xFFu8; 4];
        assert!(!p.copy_range(18, &mut dst));
        assert_eq!(dst, [0xFF; 4], "untouched on refusal");
        assert_eq!(p.read_at(18, &mut dst), 2);
        assert_eq!(dst, [18, 19, 0xFF, 0xFF]);
        assert_eq!(p.read_at(25, &mut dst), 0);
        assert!(!p.copy_to_slice(&mut dst));
        let mut whole = [0u8; 20];
        assert!(p.copy_to_slice(&mut whole));
        assert_eq!(&whole[..], &bytes[..]);
        assert_eq!(p.to_vec(), bytes);
        assert_eq!(format!("{p:?}"), "PayloadView { len: 20, stable: true }");
        let empty = PayloadView::stable(&[]);
        assert!(empty.is_empty() && empty.to_vec().is_empty() && empty.read_array::<0>(0) == Some([]));
    }
}
