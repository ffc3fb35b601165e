//! The subscriber's side: a connection per subscriber and matched publisher, handed to the I/O thread, which
//! connects and receives ([`super::client`]); the subscriber's handle follows the publisher's registration.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crate::registration::{Layer, LayerKind, LayerPar, RemoteTopic};
use crate::sync::lock;
use crate::transport::{Inbox, IoSource, LayerReader, LayerReaderFactory};
use crate::types::TypeInfo;

use super::Shared;
use super::source::TcpSource;

/// One subscriber's connection to one publisher, shared by its [`LayerReader`] and the I/O thread.
pub(super) struct ClientShared {
    pub(super) topic: Arc<str>,
    pub(super) publisher_id: u64,
    pub(super) host_name: String,
    /// The publisher is on this host (reached on loopback when its registration's source is unknown).
    pub(super) same_host: bool,
    /// Where the publisher's registration last came from (updated when it re-registers from elsewhere; used at
    /// the next connection attempt).
    pub(super) source: Mutex<Option<IpAddr>>,
    /// The announced port (updated when the publisher re-registers with another one).
    pub(super) port: AtomicU32,
    pub(super) inbox: Arc<dyn Inbox>,
    pub(super) type_info: Arc<TypeInfo>,
    /// Set when the subscriber or the publisher goes: the I/O thread closes the connection.
    pub(super) closed: AtomicBool,
    /// The connection fetches the publisher's history only (the subscriber's live data comes through another
    /// layer) and ends after it.
    pub(super) history_only: bool,
}

/// Creates the subscriber-side connections.
#[derive(Debug)]
pub(crate) struct TcpReaderFactory {
    pub(super) shared: Arc<Shared>,
}

impl LayerReaderFactory for TcpReaderFactory {
    fn subscriber_advert(&self) -> Option<Layer> {
        self.shared.sub_enabled.then(|| Layer::new(LayerKind::Tcp, true, false, LayerPar::Tcp { port: 0 }))
    }

    fn connect(
        &self,
        topic: &str,
        inbox: Arc<dyn Inbox>,
        remote: &RemoteTopic,
        same_host: bool,
    ) -> Option<Box<dyn LayerReader>> {
        // Without TCP receive, a subscriber asking for history fetches a shoal publisher's kept messages here
        // (its live data comes through another layer, `pubsub/history.rs`).
        let history_only = !self.shared.sub_enabled;
        if history_only
            && (inbox.history_depth() == 0 || remote.announced_history().is_none_or(|p| p.history_depth == 0))
        {
            return None;
        }
        let port = remote.announced_tcp_port()?;
        let client = Arc::new(ClientShared {
            topic: Arc::from(topic),
            publisher_id: remote.key.entity_id,
            host_name: remote.key.host_name.clone(),
            same_host,
            source: Mutex::new(remote.source),
            port: AtomicU32::new(u32::from(port)),
            inbox,
            type_info: Arc::new(remote.type_info.clone()),
            closed: AtomicBool::new(false),
            history_only,
        });
        tracing::debug!(
            "topic {topic}: TCP connection{} to publisher {} of {} at {:?}:{port}",
            if history_only { " for the history" } else { "" },
            remote.key.entity_id,
            remote.key.host_name,
            remote.source
        );
        lock(&self.shared.new_clients).push(Arc::clone(&client));
        Some(Box::new(TcpReader { client }))
    }

    fn io_source(&self) -> Option<Box<dyn IoSource>> {
        Some(Box::new(TcpSource::new(Arc::clone(&self.shared))))
    }
}

/// The subscriber's handle of one connection; dropping it closes the connection.
pub(super) struct TcpReader {
    pub(super) client: Arc<ClientShared>,
}

impl std::fmt::Debug for TcpReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpReader")
            .field("topic", &self.client.topic)
            .field("publisher_id", &self.client.publisher_id)
            .field("host", &self.client.host_name)
            .field("port", &self.client.port.load(Ordering::Relaxed))
            .finish()
    }
}

impl Drop for TcpReader {
    fn drop(&mut self) {
        self.client.closed.store(true, Ordering::Release);
    }
}

impl LayerReader for TcpReader {
    fn update(&mut self, remote: &RemoteTopic) {
        if let Some(port) = remote.announced_tcp_port() {
            self.client.port.store(u32::from(port), Ordering::Release);
        }
        if remote.source.is_some() {
            *lock(&self.client.source) = remote.source;
        }
    }
}
