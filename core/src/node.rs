//! [`Node`]: the entry point of the public API.

use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use crate::config::{Config, ConfigError};
use crate::io::{EventHandler, IoStartError};
use crate::monitor::Snapshot;
use crate::process::{ProcessState, Severity, SeverityLevel};
use crate::pubsub::ShmError;
use crate::pubsub::builder::{PublisherBuilder, SubscriberBuilder};
use crate::pubsub::runtime::{Runtime, RuntimeParts, RuntimeShare};
use crate::registration::{Identity, Registrar};
use crate::sync::lock;
use crate::transport::shm_ring::{self, Doorbell, DoorbellRemote};

/// Errors of [`Node::init`] and [`Node::init_with_config`].
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The configuration file is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The I/O thread or its sockets could not start.
    #[error(transparent)]
    Io(#[from] IoStartError),
    /// This process's shared-memory doorbell could not be created or opened (is /dev/shm writable?).
    #[error("cannot create this process's shared-memory doorbell")]
    Doorbell(#[source] ShmError),
    /// `[shoal_auth] protected_topics` is not a valid regular expression.
    #[error("[shoal_auth] protected_topics is not a valid regular expression: {0}")]
    AuthPattern(#[from] regex::Error),
}

/// The process-wide runtime, shared by every node created with the same configuration.
static RUNTIME: Mutex<Option<Weak<RuntimeShare>>> = Mutex::new(None);

/// A participant: creates publishers and subscribers. Cheap to clone.
///
/// Every `Node` of a process shares one runtime (one I/O thread, at most one doorbell thread), as eCAL has one per
/// process; it stops, sending its unregistration, when the last node, publisher and subscriber are dropped.
#[derive(Clone, Debug)]
pub struct Node {
    rt: Arc<RuntimeShare>,
    name: Arc<str>,
}

/// The (slot count, slot size) a publisher's native ring has under `config` once it carries messages of `len`
/// bytes (it grows to the next power of two, trading slots for size, keeping at least `[shoal_receive] queue_depth`
/// slots); `None` for a message no ring holds. `shoal perf --baseline` gives its plain ring as many slots.
#[cfg(feature = "internals")]
pub fn ring_geometry(config: &Config, len: usize) -> Option<(u32, usize)> {
    let min_slots = u32::try_from(config.receive.queue.depth).unwrap_or(u32::MAX);
    shm_ring::geometry_for(&config.shm_ring, min_slots, len)
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

    /// A builder for a publisher on `topic`: raw bytes by default, `.type_info(..)` to announce their type,
    /// `.typed::<M>()` for generated messages; `.create()` makes it.
    ///
    /// ```no_run
    /// # let node = shoal::Node::init("doc")?;
    /// let mut publ = node.publisher("camera").type_info(shoal::TypeInfo::raw("demo.Image")).create()?;
    /// publ.send(b"bytes")?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn publisher(&self, topic: &str) -> PublisherBuilder {
        PublisherBuilder::new(&self.rt, topic)
    }

    /// A builder for a subscriber on `topic`: raw samples pulled with `recv*` by default, `.typed::<M>()` for
    /// decoded messages, `.callback(..)` for delivery on the doorbell thread, `.wait(..)` for how `recv*` waits;
    /// `.create()` makes it.
    ///
    /// ```no_run
    /// # let node = shoal::Node::init("doc")?;
    /// let sub = node.subscriber("camera").create()?;
    /// let sample = sub.recv_timeout(std::time::Duration::from_secs(1))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn subscriber(&self, topic: &str) -> SubscriberBuilder {
        SubscriberBuilder::new(&self.rt, topic)
    }

    /// A builder for a service server named `name`: methods added with `.method(..)`, `.build()` opens its
    /// listener and announces it (see [`crate::service`]).
    ///
    /// ```no_run
    /// # let node = shoal::Node::init("doc")?;
    /// let raw = shoal::TypeInfo::raw("");
    /// let server = node
    ///     .service_server("math")
    ///     .method("echo", raw.clone(), raw, |req: &[u8]| Ok(req.to_vec()))
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn service_server(&self, name: &str) -> crate::service::ServerBuilder {
        crate::service::ServerBuilder::new(self.service_context(), name)
    }

    /// A builder for a client of the service named `name`; `.build()` announces it.
    ///
    /// ```no_run
    /// # let node = shoal::Node::init("doc")?;
    /// let client = node.service_client("math").build();
    /// client.wait_for_servers(1, std::time::Duration::from_secs(5))?;
    /// for r in client.call("echo", b"hello", std::time::Duration::from_secs(1))? {
    ///     println!("{}: {:?} {:?}", r.server.host_name, r.status, r.payload);
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn service_client(&self, name: &str) -> crate::service::ClientBuilder {
        crate::service::ClientBuilder::new(self.service_context(), name)
    }

    fn service_context(&self) -> crate::service::Context {
        let rt = Arc::clone(&self.rt);
        crate::service::Context {
            services: Arc::clone(&self.rt.services),
            id: self.rt.new_entity_id(),
            send: Arc::new(move |cmd| rt.io_send(cmd)),
        }
    }

    /// Sets the state this process announces (eCAL's `Process::SetState`): sent in its process registration at
    /// once and with every refresh, shown by `shoal process list`, `shoal-monitor`, the eCAL Monitor and eCAL Sys.
    /// Until it is set a process announces `unknown`, as eCAL's do. `info` is cut to
    /// [`crate::process::MAX_INFO_LEN`] bytes. The state belongs to the process (every node of it shares it).
    ///
    /// ```no_run
    /// # let node = shoal::Node::init("doc")?;
    /// use shoal::{Severity, SeverityLevel};
    /// node.set_state(Severity::Warning, SeverityLevel::Level2, "camera at 5 Hz instead of 30");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_state(&self, severity: Severity, level: SeverityLevel, info: &str) {
        self.rt.io_send(crate::io::Command::SetProcessState(ProcessState::new(severity, level, info)));
    }

    /// What registration knows right now: processes and topics of this host (and the network in network mode),
    /// eCAL's and shoal's alike, plus this process's own.
    pub fn snapshot(&self) -> Snapshot {
        let (tx, rx) = std::sync::mpsc::channel();
        self.rt.io_send(crate::io::Command::Snapshot(tx));
        let mut snapshot: Snapshot = rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap_or_default();
        snapshot.udp = self.rt.udp_counts();
        snapshot.tcp = self.rt.tcp_counts();
        snapshot.service_counts = self.rt.services.counts();
        snapshot
    }
}

fn start_runtime(name: &str, config: Config) -> Result<Arc<RuntimeShare>, InitError> {
    crate::sys::set_shm_modes(config.security.shm_access.read_mode(), config.security.shm_access.write_mode());
    for dir in [std::path::Path::new(shm_ring::SHM_DIR), config.shm_ring.huge_pages_path.as_path()] {
        let huge = dir == config.shm_ring.huge_pages_path.as_path();
        if huge
            && (config.shm_ring.huge_pages == crate::config::HugePages::Off
                || (config.shm_ring.huge_pages == crate::config::HugePages::Auto && !dir.is_dir()))
        {
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
    let doorbell = Doorbell::create().map_err(|e| InitError::Doorbell(e.into()))?;
    let self_ringer = DoorbellRemote::open(doorbell.name()).map_err(|e| InitError::Doorbell(e.into()))?;
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
    let auth_stats = Arc::new(crate::wire::auth::AuthStats::new(config.auth.key.is_some()));
    let registrar = Registrar::new(identity.clone(), &config.registration, Instant::now())
        .with_bounds(&config.limits)
        .with_auth(&config.auth, Arc::clone(&auth_stats))?;
    // The eCAL-facing layers (eCAL shared memory, UDP, TCP) register their factories here.
    let mut writer_factories: Vec<Box<dyn crate::transport::LayerWriterFactory>> = Vec::new();
    let mut reader_factories: Vec<Box<dyn crate::transport::LayerReaderFactory>> = Vec::new();
    // eCAL shared-memory layer (memfiles): first in eCAL's local priority.
    if config.layers.pub_shm {
        writer_factories.push(Box::new(crate::transport::ecal_shm::EcalShmWriterFactory::new(&config.layers)));
    }
    if config.layers.sub_shm {
        reader_factories.push(Box::new(crate::transport::ecal_shm::EcalShmReaderFactory::new()));
    }
    // eCAL UDP data layer: after eCAL shm (eCAL's local priority is shm, udp, tcp).
    let udp = crate::transport::udp::UdpLayer::new(&config, &identity.host_name, auth_stats)?;
    writer_factories.push(Box::new(udp.writer_factory()));
    reader_factories.push(Box::new(udp.reader_factory()));
    // eCAL TCP layer (tcp_pubsub); publishers choose among the layers by `[publisher] priority_*`.
    let tcp = crate::transport::ecal_tcp::TcpLayer::new(&config, &identity.host_name);
    writer_factories.push(Box::new(tcp.writer_factory()));
    reader_factories.push(Box::new(tcp.reader_factory()));
    // The I/O thread is made first (the runtime holds its handle) and polls nothing until the runtime, its event
    // handler, is made of all the parts.
    let services = crate::service::Services::new(&config, &identity.host_name);
    let mut sources: Vec<_> = reader_factories.iter().filter_map(|f| f.io_source()).collect();
    sources.push(services.io_source());
    let (io, attach) = crate::io::start(&config, registrar, sources, Arc::clone(&services.directory))?;
    let rt = Arc::new(Runtime::new(RuntimeParts {
        config,
        identity,
        doorbell,
        self_ringer,
        writer_factories,
        reader_factories,
        udp,
        tcp,
        io,
        services,
    }));
    let handler: Weak<Runtime> = Arc::downgrade(&rt);
    attach.attach(handler as Weak<dyn EventHandler>);
    Ok(RuntimeShare::new(rt))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_user_handle_shuts_the_runtime_down_while_a_runtime_thread_holds_it() {
        // A configuration of its own, so that no other test's node shares this runtime.
        let mut config = Config::default();
        config.registration.refresh = std::time::Duration::from_millis(977);
        let node = Node::init_with_config("runtime_share_test", config).expect("node");
        let publ = node.publisher("runtime_share_test").create().expect("publisher");
        // What the I/O thread holds for a moment in each refresh (`Weak::upgrade` of its event handler).
        let held = Arc::clone(node.rt.runtime());
        drop(node);
        assert!(!held.is_shut_down(), "the publisher still holds a share");
        drop(publ);
        assert!(held.is_shut_down(), "the last share's drop stops the I/O thread, after the unregistration");
        // A new node does not join the stopped runtime.
        let again = Node::init_with_config("runtime_share_test", held.config.clone()).expect("node");
        assert!(!Arc::ptr_eq(again.rt.runtime(), &held));
        assert!(!again.rt.is_shut_down());
    }
}
