//! [`Node`]: the entry point of the public API.

use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use crate::config::{Config, ConfigError};
use crate::io::IoStartError;
use crate::monitor::Snapshot;
use crate::pubsub::publisher::Publisher;
use crate::pubsub::runtime::{Runtime, lock};
use crate::pubsub::sample::Sample;
use crate::pubsub::subscriber::Subscriber;
use crate::registration::{Identity, Registrar};
use crate::transport::shm_ring::{self, Doorbell, DoorbellRemote};
use crate::types::TypeInfo;

/// Errors of [`Node::init`] and [`Node::init_with_config`].
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The configuration file is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The I/O thread or its sockets could not start.
    #[error(transparent)]
    Io(#[from] IoStartError),
    /// This process's shared-memory doorbell could not be created (is /dev/shm writable?).
    #[error("cannot create the shared-memory doorbell: {0}")]
    Doorbell(String),
}

/// Errors creating a publisher or subscriber.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// Topic names must not be empty.
    #[error("the topic name is empty")]
    EmptyTopic,
    /// The publisher's shared-memory ring could not be created.
    #[error("cannot create the shared-memory ring: {0}")]
    Ring(String),
}

/// The process-wide runtime, shared by every node created with the same configuration.
static RUNTIME: Mutex<Option<Weak<Runtime>>> = Mutex::new(None);

/// A participant: creates publishers and subscribers. Cheap to clone.
///
/// Every `Node` of a process shares one runtime (one I/O thread, at most one doorbell thread), as eCAL has one per
/// process; it stops, sending its unregistration, when the last node, publisher and subscriber are dropped.
#[derive(Clone, Debug)]
pub struct Node {
    rt: Arc<Runtime>,
    name: Arc<str>,
}

impl Node {
    /// Starts (or joins) this process's runtime, with the configuration found along the `ecal.ini` search path
    /// (`$ECAL_INI`, `./ecal.ini`, `$HOME/.ecal/ecal.ini`, `/etc/ecal/ecal.ini`) or eCAL's defaults.
    pub fn init(name: &str) -> Result<Node, InitError> {
        let cfg = Config::load()?;
        Node::init_with_config(name, cfg)
    }

    /// Starts (or joins) this process's runtime with an explicit configuration.
    ///
    /// A node asking for a configuration different from the running runtime's gets a runtime of its own.
    pub fn init_with_config(name: &str, config: Config) -> Result<Node, InitError> {
        let mut global = lock(&RUNTIME);
        if let Some(rt) = global.as_ref().and_then(Weak::upgrade)
            && rt.config == config
        {
            return Ok(Node { rt, name: Arc::from(name) });
        }
        let rt = start_runtime(name, config)?;
        *global = Some(Arc::downgrade(&rt));
        Ok(Node { rt, name: Arc::from(name) })
    }

    /// The node's name (the first node's name is the process's eCAL unit name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.rt.config
    }

    /// The host name announced in registration (`gethostname`).
    pub fn host_name(&self) -> &str {
        &self.rt.identity.host_name
    }

    /// Creates a publisher on `topic` announcing `type_info`.
    pub fn publisher(&self, topic: &str, type_info: TypeInfo) -> Result<Publisher, CreateError> {
        Publisher::create(&self.rt, topic, type_info)
    }

    /// Creates a subscriber on `topic` with the pull API (`recv`, `recv_timeout`, `try_recv`, `recv_with`).
    pub fn subscriber(&self, topic: &str) -> Result<Subscriber, CreateError> {
        Subscriber::create(&self.rt, topic, TypeInfo::default(), None)
    }

    /// Creates a subscriber on `topic` that announces the type it expects.
    pub fn subscriber_typed(&self, topic: &str, type_info: TypeInfo) -> Result<Subscriber, CreateError> {
        Subscriber::create(&self.rt, topic, type_info, None)
    }

    /// Creates a subscriber whose `callback` runs, on the process's doorbell thread, for every message.
    pub fn subscriber_with_callback(
        &self,
        topic: &str,
        callback: impl FnMut(&Sample) + Send + 'static,
    ) -> Result<Subscriber, CreateError> {
        Subscriber::create(&self.rt, topic, TypeInfo::default(), Some(Box::new(callback)))
    }

    /// What registration knows right now: processes and topics of this host (and the network in network mode),
    /// eCAL's and shoal's alike, plus this process's own.
    pub fn snapshot(&self) -> Snapshot {
        let (tx, rx) = std::sync::mpsc::channel();
        self.rt.io_send(crate::io::Command::Snapshot(tx));
        rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap_or_default()
    }
}

fn start_runtime(name: &str, config: Config) -> Result<Arc<Runtime>, InitError> {
    for dir in [std::path::Path::new(shm_ring::SHM_DIR), config.shm_ring.huge_pages_path.as_path()] {
        if dir == config.shm_ring.huge_pages_path.as_path() && !config.shm_ring.huge_pages {
            continue;
        }
        match shm_ring::remove_stale_segments(dir) {
            Ok(removed) if !removed.is_empty() => {
                tracing::info!("removed {} shared-memory files of dead processes from {}", removed.len(), dir.display())
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("cannot clean stale shared-memory files in {}: {e}", dir.display()),
        }
    }
    let doorbell = Doorbell::create().map_err(|e| InitError::Doorbell(e.to_string()))?;
    let self_ringer = DoorbellRemote::open(doorbell.name()).map_err(|e| InitError::Doorbell(e.to_string()))?;
    let host_name = crate::sys::host_name();
    let domain = if config.registration.shm_transport_domain.is_empty() {
        host_name.clone()
    } else {
        config.registration.shm_transport_domain.clone()
    };
    let identity = Identity {
        host_name,
        pid: std::process::id(),
        process_name: crate::sys::current_exe_name(),
        unit_name: name.to_string(),
        process_parameter: crate::sys::command_line(),
        shm_transport_domain: domain,
        network_mode: config.network.enabled,
    };
    let registrar = Registrar::new(identity.clone(), &config.registration, Instant::now());
    // The eCAL-facing layers (UDP, eCAL shared memory) register their factories here, in priority order.
    let writer_factories: Vec<Box<dyn crate::transport::LayerWriterFactory>> = Vec::new();
    let reader_factories: Vec<Box<dyn crate::transport::LayerReaderFactory>> = Vec::new();
    let rt = Arc::new(Runtime::new(config, identity, doorbell, self_ringer, writer_factories, reader_factories));
    let io = crate::io::start(&rt, registrar)?;
    rt.set_io(io);
    Ok(rt)
}
