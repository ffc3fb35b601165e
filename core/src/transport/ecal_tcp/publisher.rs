//! The publisher's side: a writer per publisher, its listener (started with its first TCP subscriber, or at
//! creation for a publisher with a history), and the hand-over of each message to the admitted connections from
//! the publisher's thread.

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::registration::{EntityKey, Layer, LayerKind, LayerPar, RemoteTopic};
use crate::sync::lock;
use crate::transport::{HistorySource, LayerWriteError, LayerWriter, LayerWriterFactory, SampleMeta};
use crate::types::TypeInfo;

use super::session::{Origin, Server, Session, subscriber_origin};
use super::{Shared, bump, frame};

/// Why the TCP layer did not send a message to all its subscriber connections.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TcpWriteError {
    /// The message cannot be framed (sent to none).
    #[error("cannot frame the message")]
    Encode(#[source] frame::EncodeError),
    /// Connections whose send queue stayed full: the message was dropped for them.
    #[error("message {clock} dropped for {dropped} of {connections} subscriber connections: send queue full")]
    QueueFull {
        /// The message's clock.
        clock: u64,
        /// Connections it was dropped for.
        dropped: u64,
        /// Connections it was handed to.
        connections: usize,
    },
}

/// Creates a [`LayerWriter`] per publisher.
#[derive(Debug)]
pub(crate) struct TcpWriterFactory {
    pub(super) shared: Arc<Shared>,
}

impl LayerWriterFactory for TcpWriterFactory {
    fn create(&self, publisher_id: u64, topic: &str, _type_info: &TypeInfo) -> Option<Box<dyn LayerWriter>> {
        if !self.shared.pub_enabled {
            return None;
        }
        Some(Box::new(TcpWriter {
            protected: self.shared.protection.protects(topic),
            shared: Arc::clone(&self.shared),
            publisher_id,
            id_str: publisher_id.to_string(),
            topic: topic.to_string(),
            server: None,
            start_failed: false,
            targets: 0,
            places: Vec::new(),
            peer_places: Vec::new(),
            asker_places: Vec::new(),
            history: None,
        }))
    }
}

/// The TCP writer of one publisher.
pub(super) struct TcpWriter {
    pub(super) shared: Arc<Shared>,
    pub(super) publisher_id: u64,
    pub(super) id_str: String,
    pub(super) topic: String,
    /// `[shoal_auth]` protects the topic: only authenticated subscribers make places.
    pub(super) protected: bool,
    pub(super) server: Option<Arc<Server>>,
    /// The listener could not be opened (logged once; the layer stays off for this publisher).
    pub(super) start_failed: bool,
    pub(super) targets: usize,
    /// The places of the matched subscribers (copied to the server when it starts): those of the TCP peers and
    /// of the history askers, one per subscriber.
    pub(super) places: Vec<Origin>,
    pub(super) peer_places: Vec<(EntityKey, Origin)>,
    pub(super) asker_places: Vec<(EntityKey, Origin)>,
    /// The publisher's history for late joiners (handed to the server when it starts).
    pub(super) history: Option<Arc<dyn HistorySource>>,
}

impl std::fmt::Debug for TcpWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpWriter")
            .field("publisher_id", &self.publisher_id)
            .field("topic", &self.topic)
            .field("port", &self.server.as_ref().map(|s| s.port))
            .field("targets", &self.targets)
            .field("places", &self.places.len())
            .finish_non_exhaustive()
    }
}

impl Drop for TcpWriter {
    fn drop(&mut self) {
        if let Some(s) = &self.server {
            s.closed.store(true, Ordering::Release);
            for session in lock(&s.sessions).iter() {
                session.room.notify_all();
            }
        }
    }
}

/// Binds the listener of a publisher: in local mode on the loopback interface ([`crate::transport::bind_loopback`]); else `[::]:0`
/// where IPv6 works (dual stack), or `0.0.0.0:0`.
fn bind_listener(local_only: bool) -> io::Result<std::net::TcpListener> {
    let l = if local_only {
        crate::transport::bind_loopback()?
    } else {
        std::net::TcpListener::bind((Ipv6Addr::UNSPECIFIED, 0))
            .or_else(|_| std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)))?
    };
    l.set_nonblocking(true)?;
    Ok(l)
}

impl TcpWriter {
    /// The places `subs` make (module docs), with the subscriber each belongs to.
    fn places_of(&self, subs: &[&RemoteTopic]) -> Vec<(EntityKey, Origin)> {
        subs.iter()
            .filter(|r| !self.protected || r.authenticated)
            .filter_map(|r| subscriber_origin(r, &self.shared.host_name).map(|o| (r.key.clone(), o)))
            .collect()
    }

    /// One place per matched TCP peer and per history asker that is not also a peer (it connects once).
    fn update_places(&mut self) {
        let mut places: Vec<Origin> = self.peer_places.iter().map(|(_, o)| *o).collect();
        places.extend(
            self.asker_places.iter().filter(|(k, _)| !self.peer_places.iter().any(|(p, _)| p == k)).map(|(_, o)| *o),
        );
        self.places = places;
        if let Some(server) = &self.server {
            *lock(&server.places) = self.places.clone();
        }
    }

    fn start(&mut self) {
        match bind_listener(self.shared.local_only).and_then(|l| Ok((l.local_addr()?.port(), l))) {
            Ok((port, l)) => {
                let server = Arc::new(Server {
                    topic: self.topic.clone(),
                    port,
                    listener: Mutex::new(Some(l)),
                    sessions: Mutex::new(Vec::new()),
                    places: Mutex::new(self.places.clone()),
                    admitted: Mutex::new(HashMap::new()),
                    late_drops: AtomicU64::new(0),
                    closed: AtomicBool::new(false),
                    publisher_id: self.publisher_id,
                    id_str: self.id_str.clone(),
                    history: self.history.clone(),
                });
                lock(&self.shared.new_servers).push(Arc::clone(&server));
                tracing::debug!("topic {}: TCP layer started, listening on port {port}", self.topic);
                self.server = Some(server);
            }
            Err(e) => {
                self.start_failed = true;
                tracing::warn!("topic {}: cannot open the TCP layer's listener, no TCP for it: {e}", self.topic);
            }
        }
    }

    /// Hands one message (`head` then `payload`) to one connection, waiting for room up to `deadline` if set;
    /// false when it was dropped. With nothing queued before it, the frame is written at once from this thread
    /// (one `writev`, as far as the socket takes it) and only the unwritten rest is queued; behind queued frames
    /// it is queued whole, as `whole` (built once per message, on first need).
    fn enqueue(
        &self,
        session: &Session,
        head: &[u8],
        payload: &[u8],
        whole: &mut Option<Arc<Vec<u8>>>,
        deadline: Option<Instant>,
    ) -> bool {
        let cap = self.shared.cfg.send_queue_bytes;
        let len = head.len() + payload.len();
        let mut st = lock(&session.state);
        if st.dead || !st.ready() || st.history_only {
            // Not admitted yet (handshake pending) or going: not a subscriber of this message, as in tcp_pubsub; or
            // a connection that fetches the history only (its live data comes through another layer).
            return true;
        }
        while !st.has_room(len, cap) {
            // Room may have come since the I/O thread's last turn.
            if let Err(e) = st.flush() {
                st.dead = true;
                tracing::debug!("topic {}: TCP subscriber {} lost: {e}", self.topic, session.peer);
                return true;
            }
            if st.has_room(len, cap) {
                break;
            }
            let Some(left) = deadline.and_then(|d| d.checked_duration_since(Instant::now())) else {
                return false;
            };
            st = session.room.wait_timeout(st, left).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
            if st.dead {
                return true;
            }
        }
        bump(&self.shared.counters.queued);
        let result = if st.queue.is_empty() {
            st.write_direct(head, payload).map(|n| {
                if n < len {
                    // What the socket did not take, copied into the buffer of a frame already written out if
                    // there is one.
                    let mut rest = st.frame_buffer(len - n);
                    if n < head.len() {
                        rest.extend_from_slice(&head[n..]);
                        rest.extend_from_slice(payload);
                    } else {
                        rest.extend_from_slice(&payload[n - head.len()..]);
                    }
                    st.push(Arc::new(rest));
                }
            })
        } else {
            let frame = whole.get_or_insert_with(|| {
                let mut f = st.frame_buffer(len);
                f.extend_from_slice(head);
                f.extend_from_slice(payload);
                Arc::new(f)
            });
            st.push(Arc::clone(frame));
            st.flush()
        };
        if let Err(e) = result {
            st.dead = true;
            tracing::debug!("topic {}: TCP subscriber {} lost: {e}", self.topic, session.peer);
        }
        true
    }
}

impl LayerWriter for TcpWriter {
    fn kind(&self) -> LayerKind {
        LayerKind::Tcp
    }

    fn accepts(&self, remote: &RemoteTopic, _same_host: bool) -> bool {
        !self.start_failed && remote.layers.iter().any(|l| l.kind == LayerKind::Tcp && l.is_enabled())
    }

    fn set_history_askers(&mut self, askers: &[&RemoteTopic]) {
        if self.history.is_none() {
            return;
        }
        // A subscriber whose live data comes through another layer fetches the history here.
        self.asker_places = self.places_of(askers);
        self.update_places();
    }

    fn set_peers(&mut self, peers: &[&RemoteTopic]) {
        self.peer_places = self.places_of(peers);
        self.update_places();
    }

    fn set_targets(&mut self, targets: &[&RemoteTopic]) {
        if !targets.is_empty() && self.server.is_none() && !self.start_failed {
            self.start();
        }
        self.targets = targets.len();
    }

    fn advert(&self) -> Option<Layer> {
        let s = self.server.as_ref()?;
        Some(Layer::new(LayerKind::Tcp, true, self.targets > 0, LayerPar::Tcp { port: i32::from(s.port) }))
    }

    fn write(&mut self, payload: &[u8], meta: &SampleMeta) -> Result<(), LayerWriteError> {
        let Some(server) = &self.server else { return Ok(()) };
        let sessions: Vec<Arc<Session>> = lock(&server.sessions).clone();
        if sessions.is_empty() {
            return Ok(());
        }
        let head = frame::encode_head(
            &self.topic,
            &self.id_str,
            self.publisher_id,
            meta.clock,
            meta.send_time_us,
            payload.len(),
        )
        .map_err(|e| LayerWriteError::Tcp(TcpWriteError::Encode(e)))?;
        let mut whole = None;
        let timeout = self.shared.cfg.send_timeout_ms;
        let deadline = (timeout > 0).then(|| Instant::now() + Duration::from_millis(u64::from(timeout)));
        let mut dropped = 0u64;
        for s in &sessions {
            if !self.enqueue(s, &head, payload, &mut whole, deadline) {
                dropped += 1;
            }
        }
        if dropped == 0 {
            return Ok(());
        }
        self.shared.counters.send_drops.fetch_add(dropped, Ordering::Relaxed);
        Err(LayerWriteError::Tcp(TcpWriteError::QueueFull { clock: meta.clock, dropped, connections: sessions.len() }))
    }

    fn take_late_drops(&mut self) -> u64 {
        self.server.as_ref().map_or(0, |s| s.late_drops.swap(0, Ordering::Relaxed))
    }

    fn set_history(&mut self, history: Arc<dyn HistorySource>) {
        self.history = Some(history);
        // The listener starts now, so the first registration already names the port that late joiners whose live
        // data comes through another layer fetch the history from (an announced port is what tells them it can
        // come).
        if self.server.is_none() && !self.start_failed {
            self.start();
        }
    }
}
