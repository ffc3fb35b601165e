//! The subscriber side's byte-stream state machine: what a publisher sends on a tcp_pubsub connection, fed in
//! chunks of any size, becomes [`Event`]s (its handshake, messages, what was dropped and why), sans-IO.
//!
//! Bounds, whatever the publisher sends: a frame header is 12 bytes plus at most [`MAX_HEADER_SIZE`] skipped
//! unread; the start of a payload frame (magic, length, eCAL sample header) is buffered up to 6 + 65535 bytes; a
//! payload is buffered only when it is at most `max_message` bytes, in a buffer grown as its bytes arrive
//! (doubling from 64 KiB, never beyond the payload's size), so on a new connection what the decoder holds for a
//! message is at most about twice what the publisher actually sent of it, and never more than `max_message` +
//! 64 KiB. Once the connection delivered a complete message, the buffer of a later one starts as large as the
//! largest such message (up to that one's size): a publisher that proved it sends messages that long costs no
//! regrowth (each doubling copies what came so far, nearly one more copy of a 1 MiB message), and the bound stays
//! `max_message` + 64 KiB. Buffers of delivered messages come back when their readers are done
//! ([`StreamDecoder::recycle`]; at most two of 64 KiB to 4 MiB are kept, beside that bound) and take a later payload
//! of at least 64 KiB that fits, without fresh memory. A larger frame is
//! skipped without being stored. Only an invalid frame header ends the stream ([`StreamError`]); a payload frame
//! that does not decode is skipped whole and reported.
//!
//! Clock checks per connection: a message whose clock is below the last one delivered is reported
//! ([`Event::OutOfOrder`]) and not delivered, one equal to it ([`Event::Repeat`]) is not delivered either; a gap in the clocks that the frames skipped here do not explain is
//! reported as [`Event::Lost`].

use super::frame::{self, DecodeError, FrameHeader};

/// A `header_size` above this is not tcp_pubsub (it sends 12).
pub const MAX_HEADER_SIZE: u16 = 1024;
/// A payload's buffer starts at most this large and doubles as bytes arrive.
const FIRST_CHUNK: usize = 64 * 1024;

/// A message a publisher sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `topic.topic_id` of its sample header: the publisher's entity id.
    pub publisher_id: u64,
    /// `content.clock`.
    pub clock: u64,
    /// `content.time`, µs since the UNIX epoch.
    pub time_us: i64,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// What the decoder found in the stream.
#[derive(Debug)]
pub enum Event {
    /// A protocol handshake frame (the publisher's answer to ours).
    Handshake,
    /// A shoal publisher's mark after the history a handshake asked for ([`frame::history_end`]).
    HistoryEnd,
    /// A complete message, clock above the last one delivered.
    Message(Message),
    /// A payload frame above `max_message`, skipped unread.
    TooLarge {
        /// Its announced data size.
        data_size: u64,
    },
    /// A payload frame whose data is not an eCAL message, skipped.
    Undecodable(DecodeError),
    /// A message whose clock is not above the last one delivered: not delivered.
    OutOfOrder {
        /// Its clock.
        clock: u64,
        /// The last clock delivered.
        last: u64,
    },
    /// Messages missing between the last clock delivered and the next one (frames skipped here not included).
    Lost(u64),
    /// A message with the clock of the last one delivered: not delivered, not a loss (a shoal publisher sends the
    /// message it was sending while it read its history for a new connection both ways).
    Repeat {
        /// Its clock.
        clock: u64,
    },
}

/// Why the stream cannot go on (the connection must be closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// A header whose `header_size` is below 12 or above [`MAX_HEADER_SIZE`].
    #[error("invalid tcp_pubsub frame header (header_size {0})")]
    BadHeader(u16),
}

/// Where the decoder is in the byte stream.
#[derive(Debug)]
enum Rx {
    /// Reading the 12 header bytes.
    Header { buf: [u8; frame::HEADER_LEN], got: usize },
    /// Skipping `left` bytes of a longer header, then the data of `header`.
    ExtraHeader { left: usize, header: FrameHeader },
    /// Reading the start of a payload frame's data of `data_size` bytes: magic, length, sample header.
    Head { buf: Vec<u8>, data_size: usize },
    /// Reading a message's payload into its own buffer, then skipping `trailing` bytes of the frame.
    Payload { buf: Vec<u8>, m: frame::Decoded, trailing: usize },
    /// Skipping `left` bytes (a handshake's data, a frame above `max_message` or one that did not decode).
    Skip { left: u64 },
}

impl Rx {
    fn start() -> Rx {
        Rx::Header { buf: [0; frame::HEADER_LEN], got: 0 }
    }

    fn after(left: usize) -> Rx {
        if left == 0 { Rx::start() } else { Rx::Skip { left: left as u64 } }
    }
}

/// Grows `buf` so that `need` more bytes fit, by doubling (from [`FIRST_CHUNK`], or from `proven`, the largest
/// message the connection delivered), never beyond `want` in all.
fn grow(buf: &mut Vec<u8>, need: usize, want: usize, proven: usize) {
    let spare = buf.capacity() - buf.len();
    if spare >= need {
        return;
    }
    let target = (buf.len() + need).max(buf.capacity().saturating_mul(2)).max(FIRST_CHUNK).max(proven).min(want);
    buf.reserve_exact(target.saturating_sub(buf.len()));
}

/// The state machine of one connection's incoming bytes (see the module docs).
#[derive(Debug)]
pub struct StreamDecoder {
    rx: Rx,
    max_message: usize,
    /// Clock of the last message delivered.
    last_clock: Option<u64>,
    /// Frames skipped (too large, undecodable) since then: their clocks fall into the next gap.
    skipped: u64,
    /// Payload bytes of the largest message this connection delivered completely (a later one's buffer starts
    /// this large, up to its own size).
    proven: usize,
    /// Buffers of delivered messages handed back ([`Self::recycle`]), for later payloads that fit in them.
    spare: Vec<Vec<u8>>,
}

impl StreamDecoder {
    /// A decoder at the start of a stream, taking payload frames of up to `max_message` data bytes (the eCAL
    /// sample header and the payload).
    pub fn new(max_message: usize) -> StreamDecoder {
        StreamDecoder { rx: Rx::start(), max_message, last_clock: None, skipped: 0, proven: 0, spare: Vec::new() }
    }

    /// Back to the start of a stream (a new connection), keeping the clock of the last message delivered: the
    /// next connection to the same publisher continues its clock.
    pub fn restart(&mut self) {
        self.rx = Rx::start();
        self.proven = 0;
    }

    /// Hands back the buffer of a message this decoder delivered, once its reader is done with it: kept (up to
    /// [`SPARE_BUFFERS`](crate::wire::reassembly::SPARE_BUFFERS), if its capacity is worth it) for a later payload
    /// that fits in it, which then needs no fresh memory; else freed.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        crate::wire::reassembly::keep_spare(&mut self.spare, buf);
    }

    /// Spare buffers held ([`Self::recycle`]).
    pub fn spare_buffers(&self) -> usize {
        self.spare.len()
    }

    /// Bytes the decoder holds allocated for the message in progress (for the bound in the module docs; spare
    /// buffers not included).
    pub fn held_bytes(&self) -> usize {
        match &self.rx {
            Rx::Head { buf, .. } | Rx::Payload { buf, .. } => buf.capacity(),
            _ => 0,
        }
    }

    /// While a message's payload is being read and at least `min_left` bytes of it are still to come: its
    /// buffer, grown so that its spare capacity takes the next part (at least 64 KiB or what is left), and the
    /// bytes left. A caller that appends received bytes there (at most the bytes left) then calls
    /// [`feed`](Self::feed) with no bytes to go on.
    pub fn payload_spare(&mut self, min_left: usize) -> Option<(&mut Vec<u8>, usize)> {
        let proven = self.proven;
        let Rx::Payload { buf, m, .. } = &mut self.rx else { return None };
        let want = m.payload.len();
        let left = want - buf.len();
        if left < min_left || left == 0 {
            return None;
        }
        grow(buf, left.min(buf.len().max(FIRST_CHUNK)), want, proven);
        Some((buf, left))
    }

    /// Feeds received bytes through the state machine, reporting what it completes to `out`. After an error the
    /// stream must not be fed again.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut impl FnMut(Event)) -> Result<(), StreamError> {
        loop {
            match &mut self.rx {
                Rx::Header { buf, got } => {
                    let take = (frame::HEADER_LEN - *got).min(bytes.len());
                    buf[*got..*got + take].copy_from_slice(&bytes[..take]);
                    *got += take;
                    bytes = &bytes[take..];
                    if *got < frame::HEADER_LEN {
                        return Ok(());
                    }
                    let size = u16::from_le_bytes([buf[0], buf[1]]);
                    let header = frame::parse_header(buf)
                        .filter(|h| h.header_size <= MAX_HEADER_SIZE)
                        .ok_or(StreamError::BadHeader(size))?;
                    let extra = usize::from(header.header_size) - frame::HEADER_LEN;
                    self.rx = Rx::ExtraHeader { left: extra, header };
                }
                Rx::ExtraHeader { left, header } => {
                    let take = (*left).min(bytes.len());
                    *left -= take;
                    bytes = &bytes[take..];
                    if *left > 0 {
                        return Ok(());
                    }
                    let header = *header;
                    self.rx = self.begin_data(header, out);
                }
                Rx::Skip { left } => {
                    let take = usize::try_from(*left).map_or(bytes.len(), |l| l.min(bytes.len()));
                    *left -= take as u64;
                    bytes = &bytes[take..];
                    if *left > 0 {
                        return Ok(());
                    }
                    self.rx = Rx::start();
                }
                Rx::Head { buf, data_size } => {
                    let data_size = *data_size;
                    let take = (frame::head_want(buf, data_size) - buf.len()).min(bytes.len());
                    buf.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if buf.len() < frame::head_want(buf, data_size) {
                        if bytes.is_empty() {
                            return Ok(());
                        }
                        continue;
                    }
                    let head = std::mem::take(buf);
                    self.rx = self.begin_payload(&head, data_size, out);
                }
                Rx::Payload { buf, m, trailing } => {
                    let want = m.payload.len();
                    let take = (want - buf.len()).min(bytes.len());
                    grow(buf, take, want, self.proven);
                    buf.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if buf.len() < want {
                        return Ok(());
                    }
                    self.proven = self.proven.max(want);
                    let (payload, m, trailing) = (std::mem::take(buf), m.clone(), *trailing);
                    self.rx = Rx::after(trailing);
                    self.deliver(&m, payload, out);
                }
            }
            if bytes.is_empty() && matches!(self.rx, Rx::Header { got: 0, .. }) {
                return Ok(());
            }
        }
    }

    fn begin_data(&mut self, header: FrameHeader, out: &mut impl FnMut(Event)) -> Rx {
        if header.kind != frame::TYPE_PAYLOAD {
            // The publisher's handshake (protocol version 0) or a future message type: not for the user.
            match header.kind {
                frame::TYPE_HANDSHAKE => out(Event::Handshake),
                frame::TYPE_HISTORY_END => out(Event::HistoryEnd),
                _ => {}
            }
            return if header.data_size == 0 { Rx::start() } else { Rx::Skip { left: header.data_size } };
        }
        match usize::try_from(header.data_size) {
            Ok(0) => Rx::start(),
            Ok(n) if n <= self.max_message => Rx::Head { buf: Vec::with_capacity(128), data_size: n },
            _ => {
                self.skipped += 1;
                out(Event::TooLarge { data_size: header.data_size });
                Rx::Skip { left: header.data_size }
            }
        }
    }

    /// Decodes the start of a payload frame's data (`head`, of `data_size` bytes in all); the payload is then read
    /// into a buffer of its own, or the rest of the frame skipped if it does not decode.
    fn begin_payload(&mut self, head: &[u8], data_size: usize, out: &mut impl FnMut(Event)) -> Rx {
        match frame::decode_head(head, data_size) {
            Err(e) => {
                self.skipped += 1;
                out(Event::Undecodable(e));
                Rx::after(data_size - head.len())
            }
            Ok(m) => {
                // `head` ends where the payload starts (`head_want`: the magic, the length and the sample header).
                let trailing = data_size - m.payload.end;
                if m.payload.is_empty() {
                    self.deliver(&m, Vec::new(), out);
                    return Rx::after(trailing);
                }
                // A spare buffer it fits in (already mapped), else one grown as the bytes come.
                let buf = crate::wire::reassembly::take_spare(&mut self.spare, m.payload.len()).unwrap_or_default();
                Rx::Payload { buf, m, trailing }
            }
        }
    }

    /// Reports a received message (`m` from its header, `payload` its bytes) unless its clock is out of order.
    fn deliver(&mut self, m: &frame::Decoded, payload: Vec<u8>, out: &mut impl FnMut(Event)) {
        if let Some(last) = self.last_clock {
            if m.clock == last {
                out(Event::Repeat { clock: m.clock });
                return;
            }
            if m.clock < last {
                out(Event::OutOfOrder { clock: m.clock, last });
                return;
            }
            // Skipped frames were reported when skipped; the rest of the gap never came.
            let gap = m.clock - last - 1;
            let lost = gap - gap.min(self.skipped);
            if lost > 0 {
                out(Event::Lost(lost));
            }
        }
        self.skipped = 0;
        self.last_clock = Some(m.clock);
        out(Event::Message(Message { publisher_id: m.publisher_id, clock: m.clock, time_us: m.time_us, payload }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(d: &mut StreamDecoder, bytes: &[u8]) -> (Vec<String>, Result<(), StreamError>) {
        let mut out = Vec::new();
        let r = d.feed(bytes, &mut |e| out.push(format!("{e:?}")));
        (out, r)
    }

    #[test]
    fn a_frame_announcing_a_large_message_costs_about_what_arrived_of_it() {
        let mut d = StreamDecoder::new(64 << 20);
        // A publisher announces a 60 MB message and sends 100 KB of it.
        let head = frame::encode_head("t", "5", 5, 1, 0, 60 << 20).expect("head");
        let (ev, r) = events(&mut d, &head);
        assert!(ev.is_empty() && r.is_ok());
        assert!(d.held_bytes() <= 128, "nothing of the payload held before it comes: {}", d.held_bytes());
        let (_, r) = events(&mut d, &vec![1u8; 100_000]);
        assert!(r.is_ok());
        assert!(d.held_bytes() <= 256 * 1024, "held {} for 100 KB received", d.held_bytes());
        // Read in place: the spare room grows with what arrived (at most double), never to the whole message.
        let (buf, left) = d.payload_spare(64 * 1024).expect("payload in progress");
        assert_eq!(left, (60 << 20) - 100_000);
        assert!(buf.capacity() <= 2 * 100_000 + 64 * 1024, "capacity {}", buf.capacity());
    }

    #[test]
    fn after_a_complete_message_the_next_as_long_is_received_without_regrowth() {
        let mut d = StreamDecoder::new(4 << 20);
        let payload = vec![7u8; 1 << 20];
        let first = frame::encode_message("t", "5", 5, 1, 0, &payload).expect("frame");
        // The first message: the buffer doubles as the bytes come (nothing proven yet).
        let (_, r) = events(&mut d, &first[..first.len() - payload.len() + 100_000]);
        assert!(r.is_ok());
        assert!(d.held_bytes() < 256 * 1024, "held {} for 100 KB of an unproven message", d.held_bytes());
        let (ev, r) = events(&mut d, &first[first.len() - payload.len() + 100_000..]);
        assert!(r.is_ok() && ev.len() == 1, "{ev:?}");
        // The second, as long: one buffer of the message's size from its first bytes on, filled in place.
        let second = frame::encode_message("t", "5", 5, 2, 0, &payload).expect("frame");
        let head_len = second.len() - payload.len();
        let (_, r) = events(&mut d, &second[..head_len + 1000]);
        assert!(r.is_ok());
        assert_eq!(d.held_bytes(), 1 << 20, "the whole message's buffer at once");
        let (buf, left) = d.payload_spare(1).expect("payload in progress");
        assert_eq!((buf.capacity(), left), (1 << 20, (1 << 20) - 1000));
        let at = buf.as_ptr();
        buf.extend_from_slice(&payload[1000..]);
        let mut got = Vec::new();
        d.feed(&[], &mut |e| {
            if let Event::Message(m) = e {
                got.push(m.payload)
            }
        })
        .expect("feed");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].as_ptr(), at, "delivered from the buffer it was received into");
        assert_eq!(got[0], payload);
        // Handed back by its reader, the buffer takes the next message that fits: no fresh memory.
        d.recycle(got.pop().expect("one"));
        assert_eq!(d.spare_buffers(), 1);
        let third = frame::encode_message("t", "5", 5, 3, 0, &payload[..500_000]).expect("frame");
        let (ev, r) = events(&mut d, &third);
        assert!(r.is_ok() && ev.len() == 1, "{ev:?}");
        assert_eq!(d.spare_buffers(), 0, "the spare took the message");
        d.recycle(vec![0u8; 100]);
        assert_eq!(d.spare_buffers(), 0, "a small buffer is not kept");
        // A new connection proves its sizes again.
        d.restart();
        let (_, r) = events(&mut d, &second[..head_len + 1000]);
        assert!(r.is_ok());
        assert!(d.held_bytes() < 256 * 1024, "held {} after a restart", d.held_bytes());
    }

    #[test]
    fn the_same_events_whatever_the_chunks_and_reads_in_place() {
        let mut stream = frame::handshake().to_vec();
        for (clock, len) in [(1u64, 3usize), (2, 200_000), (5, 0), (5, 10), (6, 70_000)] {
            let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8 ^ clock as u8).collect();
            stream.extend_from_slice(&frame::encode_message("t", "9", 9, clock, 7, &payload).expect("frame"));
        }
        stream.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // header_size 3: the end
        let mut whole = StreamDecoder::new(150_000);
        let (expected, end) = events(&mut whole, &stream);
        assert_eq!(end, Err(StreamError::BadHeader(3)));
        assert_eq!(expected.len(), 7, "{expected:?}"); // handshake, 1, too large, lost 2, 5, repeat, 6
        assert!(expected[2].starts_with("TooLarge") && expected[3] == "Lost(2)" && expected[5].starts_with("Repeat"));
        for chunk in [1, 7, 13, 4096, 65_536, 1 << 20] {
            let mut d = StreamDecoder::new(150_000);
            let mut got = Vec::new();
            let mut end = Ok(());
            'feed: for mut part in stream.chunks(chunk) {
                while !part.is_empty() {
                    if let Some((buf, left)) = d.payload_spare(1024) {
                        let n = (buf.capacity() - buf.len()).min(left).min(part.len());
                        assert!(n > 0);
                        buf.extend_from_slice(&part[..n]);
                        part = &part[n..];
                        if let Err(e) = d.feed(&[], &mut |e| got.push(format!("{e:?}"))) {
                            end = Err(e);
                            break 'feed;
                        }
                    } else {
                        if let Err(e) = d.feed(part, &mut |e| got.push(format!("{e:?}"))) {
                            end = Err(e);
                            break 'feed;
                        }
                        part = &[];
                    }
                    assert!(d.held_bytes() <= 256 * 1024, "chunk {chunk}: held {}", d.held_bytes());
                }
            }
            assert_eq!(got, expected, "chunks of {chunk}");
            assert_eq!(end, Err(StreamError::BadHeader(3)));
        }
    }

    #[test]
    fn the_last_clock_again_is_a_repeat_and_an_older_one_out_of_order() {
        let mut d = StreamDecoder::new(1 << 20);
        let mut stream = frame::handshake().to_vec();
        for clock in [3u64, 4, 4, 2, 5] {
            stream.extend_from_slice(&frame::encode_message("t", "9", 9, clock, 7, b"x").expect("frame"));
        }
        let (ev, r) = events(&mut d, &stream);
        assert!(r.is_ok());
        let kinds: Vec<&str> = ev.iter().map(|e| e.split([' ', '(', '{']).next().unwrap_or("")).collect();
        assert_eq!(kinds, ["Handshake", "Message", "Message", "Repeat", "OutOfOrder", "Message"], "{ev:?}");
    }
}
