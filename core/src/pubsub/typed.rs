//! Typed publishers and subscribers: [`TypedPublisher`] and [`TypedSubscriber`] over a generated [`Message`] type.
//!
//! ```no_run
//! # fn demo<Imu: shoal::Message + Default>() -> Result<(), Box<dyn std::error::Error>> {
//! let node = shoal::Node::init("typed")?;
//! let mut publ = node.publisher("imu").typed::<Imu>().create()?;
//! let sub = node.subscriber("imu").typed::<Imu>().create()?;
//! publ.send(&Imu::default())?;
//! let got = sub.recv_timeout(std::time::Duration::from_secs(1))?;
//! println!("clock {} from {}", got.meta.clock, got.meta.publisher_id);
//! # Ok(()) }
//! ```

use std::collections::HashSet;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::pubsub::builder::SubOptions;
use crate::pubsub::publisher::Publisher;
use crate::pubsub::runtime::RuntimeShare;
use crate::pubsub::subscriber::{CallbackSubscriber, SubHandle, Subscriber, subscriber_status};
use crate::pubsub::{CreateError, LoanError, RecvError};
use crate::sample::{Sample, SampleRef};
use crate::stats::Via;
use crate::sync::lock;
use crate::types::{DecodeError, EncodeError, Message, MessageSink, TypeInfo};

/// Errors of [`TypedPublisher::send`].
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum TypedSendError {
    /// The message could not be encoded.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// No shared-memory slot for the encoded size.
    #[error(transparent)]
    Loan(#[from] LoanError),
}

/// Errors of the `recv*` methods of [`TypedSubscriber`].
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum TypedRecvError {
    /// Nothing received (timeout), or a callback subscriber was asked to `recv`.
    #[error(transparent)]
    Recv(#[from] RecvError),
    /// A message arrived but its bytes are not a valid message of the expected type (the message is consumed).
    #[error("{error} (publisher {publisher_id:#x}, clock {clock})")]
    Decode {
        /// The decoder's error.
        #[source]
        error: DecodeError,
        /// The sending publisher's entity id.
        publisher_id: u64,
        /// The message's clock.
        clock: u64,
    },
    /// A message arrived from a publisher announcing another type (see [`TypeInfo::mismatches`]); it was not decoded.
    #[error(
        "publisher {publisher_id:#x} sends `{announced}` ({announced_encoding}), this subscriber expects `{expected}`"
    )]
    TypeMismatch {
        /// The publisher's announced type name.
        announced: String,
        /// The publisher's announced encoding.
        announced_encoding: String,
        /// This subscriber's type name.
        expected: &'static str,
        /// The sending publisher's entity id.
        publisher_id: u64,
    },
}

/// Metadata of a received message.
#[derive(Debug, Clone)]
pub struct MessageMeta {
    /// Send time stamped by the publisher, in µs since the UNIX epoch (eCAL's unit).
    pub send_time_us: i64,
    /// Send time stamped by the publisher, in ns since the UNIX epoch (µs precision from eCAL's layers).
    pub send_time_ns: i64,
    /// How the message reached this subscriber.
    pub via: Via,
    /// The publisher's message counter (1 for its first message).
    pub clock: u64,
    /// The publisher's entity id.
    pub publisher_id: u64,
    /// The publisher's announced type information.
    pub type_info: Arc<TypeInfo>,
}

impl MessageMeta {
    fn of(s: &SampleRef<'_>) -> MessageMeta {
        MessageMeta {
            send_time_us: s.send_time_us(),
            send_time_ns: s.send_time_ns,
            via: s.via,
            clock: s.clock,
            publisher_id: s.publisher_id,
            type_info: Arc::clone(s.type_info),
        }
    }
}

/// A decoded message with its metadata.
#[derive(Debug, Clone)]
pub struct Received<M> {
    /// The message.
    pub msg: M,
    /// Who sent it and when.
    pub meta: MessageMeta,
}

/// A [`MessageSink`] writing into one shared-memory loan of the publisher, then sending it. A loan or send error
/// goes back to the encoder as [`EncodeError::Sink`] with the error as its source, and from there to
/// [`TypedPublisher::send`], which returns it as itself ([`TypedSendError::Loan`]).
struct LoanSink<'p> {
    publ: &'p mut Publisher,
    calls: usize,
}

impl MessageSink for LoanSink<'_> {
    fn write_exact(
        &mut self,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<(), EncodeError>,
    ) -> Result<(), EncodeError> {
        self.calls += 1;
        if self.calls > 1 {
            return Err(EncodeError::WriteCount { calls: self.calls });
        }
        let loan = self.publ.loan(len).map_err(|e| EncodeError::Sink(Box::new(e)))?;
        let mut filled = Ok(());
        let loan = loan.write(|buf| filled = fill(buf));
        // On an encoder error the loan is dropped unsent.
        filled?;
        loan.send();
        Ok(())
    }
}

/// The typed form of an encoding error: the publisher's own loan and send errors as themselves.
fn typed_send_error(e: EncodeError) -> TypedSendError {
    match e {
        EncodeError::Sink(source) => match source.downcast::<LoanError>() {
            Ok(l) => TypedSendError::Loan(*l),
            Err(source) => TypedSendError::Encode(EncodeError::Sink(source)),
        },
        e => TypedSendError::Encode(e),
    }
}

/// Sends messages of type `M` on one topic, announcing `M::type_info()`. Dropping it unregisters it.
pub struct TypedPublisher<M: Message> {
    publ: Publisher,
    _type: PhantomData<fn(&M)>,
}

impl<M: Message> std::fmt::Debug for TypedPublisher<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedPublisher").field("type", &M::type_info().name).field("publ", &self.publ).finish()
    }
}

impl<M: Message> TypedPublisher<M> {
    pub(crate) fn new(publ: Publisher) -> Self {
        TypedPublisher { publ, _type: PhantomData }
    }

    /// Encodes `msg` straight into a shared-memory loan and sends it (protobuf: no intermediate buffer;
    /// FlatBuffers: one copy from the reused builder).
    pub fn send(&mut self, msg: &M) -> Result<(), TypedSendError> {
        let mut sink = LoanSink { publ: &mut self.publ, calls: 0 };
        msg.encode(&mut sink).map_err(typed_send_error)?;
        if sink.calls == 0 {
            return Err(TypedSendError::Encode(EncodeError::WriteCount { calls: 0 }));
        }
        Ok(())
    }

    /// The untyped publisher underneath (statistics, `send` of pre-encoded bytes).
    pub fn raw(&self) -> &Publisher {
        &self.publ
    }

    /// The untyped publisher underneath, mutably.
    pub fn raw_mut(&mut self) -> &mut Publisher {
        &mut self.publ
    }

    /// The topic name.
    pub fn topic(&self) -> &str {
        self.publ.topic()
    }

    /// The entity id announced in registration.
    pub fn id(&self) -> u64 {
        self.publ.id()
    }

    /// Number of matched subscribers.
    pub fn subscriber_count(&self) -> usize {
        self.publ.subscriber_count()
    }

    /// Waits until at least `n` subscribers are matched, at most `timeout`; see [`Publisher::wait_for_subscribers`].
    pub fn wait_for_subscribers(&self, n: usize, timeout: Duration) -> Result<usize, crate::pubsub::MatchTimeout> {
        self.publ.wait_for_subscribers(n, timeout)
    }
}

/// Checks publishers' announced types against the expected one, warning once per publisher.
#[derive(Debug)]
struct TypeCheck {
    expected: &'static TypeInfo,
    topic: Arc<str>,
    /// Publishers already warned about (bounded: ids of UDP samples come from the wire; beyond the bound a
    /// mismatching publisher is still rejected, only not named in the log again).
    warned: Mutex<HashSet<u64>>,
}

/// Publishers a [`TypeCheck`] remembers having warned about.
const MAX_WARNED_PUBLISHERS: usize = 256;

impl TypeCheck {
    fn new<M: Message>(topic: &str) -> TypeCheck {
        TypeCheck { expected: M::type_info(), topic: Arc::from(topic), warned: Mutex::default() }
    }

    fn check(&self, publisher_id: u64, announced: &TypeInfo) -> Result<(), TypedRecvError> {
        if !announced.mismatches(self.expected) {
            return Ok(());
        }
        let mut warned = lock(&self.warned);
        if warned.len() < MAX_WARNED_PUBLISHERS && warned.insert(publisher_id) {
            tracing::warn!(
                "topic {}: publisher {publisher_id:#x} announces type `{}` ({}), expected `{}` ({}); \
                 its messages are rejected",
                self.topic,
                announced.name,
                announced.encoding,
                self.expected.name,
                self.expected.encoding
            );
        }
        Err(TypedRecvError::TypeMismatch {
            announced: announced.name.clone(),
            announced_encoding: announced.encoding.clone(),
            expected: type_name(self.expected),
            publisher_id,
        })
    }
}

fn type_name(t: &'static TypeInfo) -> &'static str {
    t.name.as_str()
}

/// Checks the sample's announced type, then `parse`s its payload (decode or view) from one slice: in place when the
/// payload is stable, else copied into `scratch` first (a ring slot is never lent as a slice, see
/// [`PayloadView`](crate::PayloadView)). `scratch` is locked only for that copy.
fn checked<T>(
    check: &TypeCheck,
    s: &SampleRef<'_>,
    scratch: &Mutex<Vec<u8>>,
    parse: impl FnOnce(&[u8]) -> Result<T, DecodeError>,
) -> Result<T, TypedRecvError> {
    check.check(s.publisher_id, s.type_info)?;
    let parsed = match s.payload.as_slice() {
        Some(bytes) => parse(bytes),
        None => parse(s.payload.slice_or_copy(&mut lock(scratch))),
    };
    parsed.map_err(|error| TypedRecvError::Decode { error, publisher_id: s.publisher_id, clock: s.clock })
}

fn decode_sample<M: Message>(
    check: &TypeCheck,
    s: SampleRef<'_>,
    scratch: &Mutex<Vec<u8>>,
) -> Result<Received<M>, TypedRecvError> {
    let msg = checked(check, &s, scratch, M::decode)?;
    Ok(Received { msg, meta: MessageMeta::of(&s) })
}

/// Receives messages of type `M` on one topic, announcing `M::type_info()` as the type it expects.
///
/// A publisher announcing another type is reported once (`tracing::warn!`, and `type_mismatch` in the monitor
/// snapshot) and its messages are rejected with [`TypedRecvError::TypeMismatch`]; bytes that do not decode give
/// [`TypedRecvError::Decode`]. Neither panics.
pub struct TypedSubscriber<M: Message> {
    sub: Subscriber,
    check: Arc<TypeCheck>,
    /// Where a ring sample's bytes are copied to be decoded or viewed (reused; as large as the largest such message).
    scratch: Mutex<Vec<u8>>,
    _type: PhantomData<fn() -> M>,
}

impl<M: Message> std::fmt::Debug for TypedSubscriber<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedSubscriber").field("type", &M::type_info().name).field("sub", &self.sub).finish()
    }
}

impl<M: Message> TypedSubscriber<M> {
    pub(crate) fn create(rt: &Arc<RuntimeShare>, topic: &str, opts: SubOptions) -> Result<Self, CreateError> {
        let check = Arc::new(TypeCheck::new::<M>(topic));
        let sub = Subscriber::create(rt, topic, M::type_info().clone(), opts)?;
        Ok(TypedSubscriber { sub, check, scratch: Mutex::default(), _type: PhantomData })
    }

    fn handle(&self) -> &SubHandle {
        self.sub.handle()
    }

    subscriber_status!();

    /// Waits for the next message and decodes it.
    pub fn recv(&self) -> Result<Received<M>, TypedRecvError> {
        self.sub.recv_with(None, |s| decode_sample::<M>(&self.check, s, &self.scratch))?
    }

    /// Waits up to `timeout` for the next message and decodes it.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Received<M>, TypedRecvError> {
        self.sub.recv_with(Some(timeout), |s| decode_sample::<M>(&self.check, s, &self.scratch))?
    }

    /// The next message if one is there, decoded, without waiting.
    pub fn try_recv(&self) -> Result<Option<Received<M>>, TypedRecvError> {
        let Some(s) = self.sub.try_recv() else { return Ok(None) };
        decode_sample::<M>(&self.check, s.view(), &self.scratch).map(Some)
    }

    /// Waits (up to `timeout`, or forever with `None`) for the next message and runs `f` on a borrowed view of it:
    /// `XxxRef<'_>` for FlatBuffers (fields read when accessed), the decoded message for protobuf. The view reads the
    /// received bytes in place when they are stable (same process, eCAL layers, UDP, TCP); a sample from a shoal
    /// ring is first copied into a buffer this subscriber reuses, because the publisher may overwrite its slot
    /// meanwhile (see [`PayloadView`](crate::PayloadView)). As with [`Subscriber::recv_with`], a result computed on
    /// a slot the publisher overwrote meanwhile is discarded and `f` runs again on a later message.
    pub fn recv_with<R>(
        &self,
        timeout: Option<Duration>,
        mut f: impl FnMut(M::View<'_>, &MessageMeta) -> R,
    ) -> Result<R, TypedRecvError> {
        self.sub.recv_with(timeout, |s| {
            let meta = MessageMeta::of(&s);
            checked(&self.check, &s, &self.scratch, |bytes| M::view(bytes).map(|view| f(view, &meta)))
        })?
    }

    /// The untyped subscriber underneath (statistics, drops, raw samples).
    pub fn raw(&self) -> &Subscriber {
        &self.sub
    }
}

/// Creates a callback subscriber that decodes every message as `M` before calling `callback`; messages that do not
/// decode, or come from a publisher announcing another type, are counted
/// ([`CallbackSubscriber::decode_errors`]) and logged.
pub(crate) fn typed_callback_subscriber<M: Message>(
    rt: &Arc<RuntimeShare>,
    topic: &str,
    mut callback: impl FnMut(M, &MessageMeta) + Send + 'static,
    opts: SubOptions,
) -> Result<CallbackSubscriber, CreateError> {
    let check = TypeCheck::new::<M>(topic);
    let decode_errors = Arc::new(AtomicU64::new(0));
    let errors = Arc::clone(&decode_errors);
    // Never locked: an owned sample's payload is stable and decoded in place.
    let scratch = Mutex::default();
    let raw = move |s: &Sample| match decode_sample::<M>(&check, s.view(), &scratch) {
        Ok(r) => callback(r.msg, &r.meta),
        // Logged once per publisher by the check.
        Err(TypedRecvError::TypeMismatch { .. }) => {
            errors.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("topic {}: {e}", check.topic);
        }
    };
    CallbackSubscriber::create(rt, topic, M::type_info().clone(), Box::new(raw), decode_errors, opts)
}
