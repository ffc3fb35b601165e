//! Transports. `shm_ring` is shoal's own; the eCAL-facing layers (UDP, eCAL shared-memory memfiles, TCP)
//! plug into publishers and subscribers through the `LayerWriter` and `LayerReaderFactory` traits below, so
//! `pubsub` never knows their byte formats.
//!
//! Layer choice per connection (a publisher and one remote subscriber) is made by the publisher, in priority order:
//! same process (in-memory queue) > native ring (same host, both shoal) > the first eCAL layer, in the order
//! `[publisher] priority_local` / `priority_remote` list them (eCAL's defaults: shm, udp, tcp on this host; udp,
//! tcp to other hosts), that the subscriber has enabled. A layer is started lazily, when it gets its first
//! subscriber, and only then appears in the publisher's registration, as eCAL does.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::registration::{Layer, LayerKind, RemoteTopic};

pub(crate) mod clock;
pub(crate) mod recycle;
#[allow(unsafe_code)]
pub mod shm_ring;

#[allow(unsafe_code)]
pub mod ecal_shm;
pub mod ecal_tcp;
pub mod udp;

/// What travels with every sample, whatever the layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SampleMeta {
    /// The publisher's entity id (eCAL `topic_id`).
    pub(crate) publisher_id: u64,
    /// The publisher's message counter (1, 2, ...).
    pub(crate) clock: u64,
    /// Send time, µs since the UNIX epoch.
    pub(crate) send_time_us: i64,
}

/// Errors of [`LayerWriter::write`]: the layer failed for this message (its error, the source, says why); other
/// layers still got it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LayerWriteError {
    /// eCAL's UDP layer.
    #[error("UDP layer")]
    Udp(#[source] udp::UdpWriteError),
    /// eCAL's shared-memory layer.
    #[error("eCAL shared-memory layer")]
    Shm(#[source] ecal_shm::ShmWriteError),
    /// eCAL's TCP layer.
    #[error("TCP layer")]
    Tcp(#[source] ecal_tcp::TcpWriteError),
}

impl LayerWriteError {
    /// The error and its sources, `": "`-separated, for a log line.
    pub(crate) fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(s) = source {
            text.push_str(": ");
            text.push_str(&s.to_string());
            source = s.source();
        }
        text
    }
}

/// Publisher side of an eCAL-facing layer, owned by one publisher.
pub(crate) trait LayerWriter: Send + std::fmt::Debug {
    /// The layer's kind (its `transport_layer.type` in registration).
    fn kind(&self) -> LayerKind;

    /// Whether this layer can serve `remote` (whose registration advertises its enabled layers);
    /// `same_host` tells whether it runs on our host (shared-memory layers need that).
    fn accepts(&self, remote: &RemoteTopic, same_host: bool) -> bool;

    /// The remote subscribers this layer serves from now on (chosen by the publisher). The first non-empty call
    /// starts the layer (lazy start); an empty list may leave it started, as eCAL does.
    fn set_targets(&mut self, targets: &[&RemoteTopic]);

    /// Every matched remote subscriber this layer accepts, whichever eCAL-facing layer the publisher chose for it
    /// (those reading the native ring excepted): those that may reach the layer by themselves (eCAL's TCP
    /// subscribers connect to any publisher that announces a port). Called before [`LayerWriter::set_targets`]
    /// whenever the matched subscribers change.
    fn set_peers(&mut self, _peers: &[&RemoteTopic]) {}

    /// The matched subscribers that ask for this publisher's history and read no native ring of it (shoal
    /// subscribers made with `history(..)`, whichever layer carries their live data): a layer that serves the
    /// history apart from live data (TCP, `pubsub/history.rs`) makes room for them. Called before
    /// [`LayerWriter::set_peers`] whenever the matched subscribers change, for publishers with a history only.
    fn set_history_askers(&mut self, _askers: &[&RemoteTopic]) {}

    /// The registration entry, or `None` while the layer is not started.
    fn advert(&self) -> Option<Layer>;

    /// Called before [`LayerWriter::write`] with the payload length: makes room for it (e.g. re-creates a
    /// shared-memory file under a new name). True when [`LayerWriter::advert`] changed, so that the publisher
    /// re-registers at once, before the write, as eCAL does.
    fn prepare(&mut self, _len: usize) -> bool {
        false
    }

    /// Sends one sample to the layer's targets. Never blocks for long: a layer that cannot take the sample now
    /// drops it and counts it.
    fn write(&mut self, payload: &[u8], meta: &SampleMeta) -> Result<(), LayerWriteError>;

    /// Messages accepted by [`LayerWriter::write`] and lost later (a layer that sends from another thread),
    /// since the last call; the publisher adds them to its drops.
    fn take_late_drops(&mut self) -> u64 {
        0
    }

    /// The publisher keeps a history for late joiners: a layer that can send it to a subscriber that asks (TCP:
    /// on the new connection, before live data) reads it here. Called once, at creation, for such publishers.
    fn set_history(&mut self, _history: std::sync::Arc<dyn HistorySource>) {}
}

/// The messages a publisher keeps for late joiners (`pubsub/history.rs`), as a layer reads them.
pub(crate) trait HistorySource: Send + Sync + std::fmt::Debug {
    /// Calls `f(clock, send time µs, payload)` for the newest `depth` kept messages (`u32::MAX`: all), oldest
    /// first, under the store's lock (a send keeps its message under it before it writes the layers), and counts
    /// them as sent again.
    fn replay(&self, depth: u32, f: &mut dyn FnMut(u64, i64, &[u8]));
}

/// Creates the eCAL-facing writers of a new publisher (not started yet).
pub(crate) trait LayerWriterFactory: Send + Sync + std::fmt::Debug {
    /// A writer for a publisher with this id, topic and type.
    fn create(
        &self,
        publisher_id: u64,
        topic: &str,
        type_info: &crate::types::TypeInfo,
    ) -> Option<Box<dyn LayerWriter>>;
}

/// Where a reader layer delivers what it receives: the subscriber's inbox (also used by same-process publishers).
pub(crate) trait Inbox: Send + Sync {
    /// Delivers one sample (the inbox copies nothing more; it counts and bounds).
    fn push(&self, sample: crate::sample::Sample);
    /// Delivers one sample without waking the subscriber's waiters: a layer delivering a batch calls
    /// [`wake`](Self::wake) once after it.
    fn push_unwoken(&self, sample: crate::sample::Sample) {
        self.push(sample);
    }
    /// Delivers every sample of `samples` (left empty) as [`push_unwoken`](Self::push_unwoken) would, one after
    /// the other: a layer that received several at once hands them over together (one lock, not one per sample).
    fn push_batch_unwoken(&self, samples: &mut Vec<crate::sample::Sample>) {
        for s in samples.drain(..) {
            self.push_unwoken(s);
        }
    }
    /// Wakes the waiters of samples delivered with [`push_unwoken`](Self::push_unwoken) or
    /// [`push_batch_unwoken`](Self::push_batch_unwoken).
    fn wake(&self) {}
    /// Whether samples of this publisher already arrive through the native ring (then other layers' copies are
    /// duplicates and must be dropped by the caller).
    fn reads_ring_of(&self, publisher_id: u64) -> bool;
    /// Counts `n` samples a layer lost or rejected on the way to this subscriber (they show in its drops).
    fn count_drops(&self, n: u64);
    /// The kept messages the subscriber asks of each publisher (0 none, `u32::MAX` all), for a layer that asks a
    /// publisher for them when it connects (TCP).
    fn history_depth(&self) -> u32 {
        0
    }
    /// Delivers one message of a publisher's history (what a connection that asked for it receives before the
    /// publisher's [`Inbox::history_end`] mark); it waits there with the live data of that publisher that came
    /// another way (`pubsub/history.rs`, `HistoryGate`). Wakes the waiters as [`Inbox::push`] does.
    fn push_history(&self, sample: crate::sample::Sample) {
        self.push(sample);
    }
    /// `publisher_id`'s history has all come: it and the live data that waited go to the subscriber, in order.
    fn history_end(&self, _publisher_id: u64) {}
}

/// A subscriber-side connection of an eCAL-facing layer to one remote publisher; dropping it disconnects.
pub(crate) trait LayerReader: Send + std::fmt::Debug {
    /// The remote publisher's registration changed (e.g. its memfile was re-created under a new name).
    fn update(&mut self, remote: &RemoteTopic);
    /// Samples lost on this connection so far.
    fn drops(&self) -> u64 {
        0
    }
}

/// Creates subscriber-side layer connections, and says what the subscriber advertises for the layer.
pub(crate) trait LayerReaderFactory: Send + Sync + std::fmt::Debug {
    /// The entry a subscriber advertises (e.g. `udp` enabled), or `None` if the layer is switched off.
    fn subscriber_advert(&self) -> Option<Layer>;

    /// Connects a subscriber to a remote publisher that advertises this layer, or `None` if this layer does not
    /// serve it (the publisher did not start it, another host for a shared-memory layer, ...).
    fn connect(
        &self,
        topic: &str,
        inbox: std::sync::Arc<dyn Inbox>,
        remote: &RemoteTopic,
        same_host: bool,
    ) -> Option<Box<dyn LayerReader>>;

    /// A subscriber was created (before its registration goes out). Layers that receive from publishers they do
    /// not know yet (eCAL UDP) start listening for it here.
    fn subscriber_created(&self, _sub_id: u64, _topic: &str, _inbox: &std::sync::Arc<dyn Inbox>) {}

    /// The subscriber created with `sub_id` is being dropped.
    fn subscriber_dropped(&self, _sub_id: u64, _topic: &str) {}

    /// Sockets this layer wants the I/O thread to poll; asked once when the I/O thread starts.
    fn io_source(&self) -> Option<Box<dyn IoSource>> {
        None
    }
}

/// Sockets a layer receives on, driven by the I/O thread (never blocking).
pub(crate) trait IoSource: Send {
    /// Called after every wake-up of the I/O thread (at least every 500 ms): open or close sockets, join or leave
    /// groups, expire state. Sockets are registered with `registry` (readable) under `token`. Must be cheap when
    /// nothing changed.
    fn maintain(&mut self, registry: &mio::Registry, token: mio::Token, now: std::time::Instant);

    /// The socket registered under the source's token is readable: receive up to `batch` datagrams. True when
    /// the batch ended before the socket would block (the I/O thread calls again on its next turn). Also called
    /// on the turn after [`IoSource::on_token`] returned true.
    fn on_readable(&mut self, now: std::time::Instant, batch: usize) -> bool;

    /// Called once when the I/O thread starts: this source may register further sockets under the tokens
    /// `first .. first + count` (one per connection); their readiness goes to [`IoSource::on_token`].
    fn set_token_space(&mut self, _first: usize, _count: usize) {}

    /// A socket registered under one of this source's own tokens is ready (read, write or closed). True when
    /// work is left that the source wants to finish on the next turn ([`IoSource::on_readable`]).
    fn on_token(&mut self, _registry: &mio::Registry, _token: mio::Token, _now: std::time::Instant) -> bool {
        false
    }

    /// Called once when the I/O thread starts, with the waker other threads use to wake it (a source that
    /// takes work from user threads, such as queued sends).
    fn set_waker(&mut self, _waker: std::sync::Arc<mio::Waker>) {}

    /// Called on every turn, first: send what user threads queued. Returns when the source wants to be called
    /// again at the latest (a flush delay, a retry), `None` when nothing waits.
    fn flush(&mut self, _now: std::time::Instant) -> Option<std::time::Instant> {
        None
    }

    /// The I/O thread is about to sleep. True when work arrived meanwhile that must not wait (then it does not
    /// sleep); a source whose producers wake the thread marks itself idle here.
    fn before_sleep(&mut self) -> bool {
        false
    }

    /// Datagrams the kernel dropped on this source's socket because its receive buffer was full
    /// (`SO_RXQ_OVFL`), since it was opened.
    fn kernel_drops(&self) -> u64 {
        0
    }
}

/// A listener reachable from this host only: the wildcard address (dual stack where IPv6 works) bound to the
/// loopback interface (`SO_BINDTODEVICE lo`), so that every loopback address (eCAL peers connect to what the listener's
/// host name resolves to, often 127.0.1.1) reaches it and no other interface does; where the option is
/// refused, `127.0.0.1` alone.
pub(crate) fn bind_loopback() -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let on_lo = |domain: Domain, addr: SocketAddr| -> io::Result<Socket> {
        let s = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
        if domain == Domain::IPV6 {
            s.set_only_v6(false)?;
        }
        s.set_reuse_address(true)?;
        s.bind_device(Some(b"lo"))?;
        s.bind(&addr.into())?;
        s.listen(128)?;
        Ok(s)
    };
    let socket = on_lo(Domain::IPV6, SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)))
        .or_else(|_| on_lo(Domain::IPV4, SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))));
    match socket {
        Ok(s) => Ok(s.into()),
        Err(e) => {
            tracing::debug!("TCP listener: cannot bind to the loopback interface ({e}); listening on 127.0.0.1 only");
            std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        }
    }
}
