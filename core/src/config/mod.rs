//! Typed configuration: built-in defaults equal to eCAL's, `ecal.ini` parsing and validation.
//!
//! (Parser and validation are being written; the struct shapes below are the contract.)

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

/// How a blocking receive waits for the next sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitStrategy {
    /// Sleep on the futex doorbell at once.
    Block,
    /// Spin for the given time, then sleep on the doorbell.
    SpinThenBlock(Duration),
    /// Spin without ever sleeping (lowest latency, burns a core).
    BusySpin,
}

/// The whole configuration of a node.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub registration: RegistrationConfig,
    pub network: NetworkConfig,
    pub shm_ring: ShmRingConfig,
    pub receive: ReceiveConfig,
    pub io: IoConfig,
    /// Where this configuration was read from (`None`: built-in defaults).
    pub source: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RegistrationConfig {
    /// Period of the registration samples (eCAL: 1000 ms).
    pub refresh: Duration,
    /// A remote entity not refreshed for this long is dropped (eCAL: 10000 ms).
    pub timeout: Duration,
    /// Registration UDP port (eCAL: 14000).
    pub port: u16,
    /// Apply samples sent by this process itself (eCAL: true).
    pub loopback: bool,
    /// eCAL `shm_transport_domain`; empty means the host name.
    pub shm_transport_domain: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NetworkConfig {
    /// Network mode (multicast across hosts) instead of local broadcast.
    pub enabled: bool,
    /// Local-mode broadcast address (eCAL: 127.255.255.255).
    pub local_broadcast: Ipv4Addr,
    /// Network-mode multicast group (eCAL: 239.0.0.1).
    pub multicast_group: Ipv4Addr,
    /// Mask for the per-topic groups (eCAL: 255.255.255.240).
    pub multicast_mask: Ipv4Addr,
    /// Multicast TTL in network mode (eCAL: 3).
    pub multicast_ttl: u32,
    /// Interface address for multicast send/join; `0.0.0.0` = let the OS choose.
    pub multicast_interface: Ipv4Addr,
    /// UDP data layer port (eCAL: 14002).
    pub data_port: u16,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ShmRingConfig {
    /// Use shoal's native shared-memory ring between shoal processes on one host.
    pub enabled: bool,
    /// Slots per publisher ring (power of two).
    pub slot_count: u32,
    /// Initial payload bytes per slot; a larger message grows the ring.
    pub slot_size: usize,
    /// Put ring segments on a hugetlbfs mount.
    pub huge_pages: bool,
    /// The hugetlbfs mount used when `huge_pages` is on.
    pub huge_pages_path: PathBuf,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReceiveConfig {
    pub wait: WaitStrategy,
}

#[derive(Debug, Clone, PartialEq)]
pub struct IoConfig {
    /// CPUs the I/O thread is pinned to (empty: no pinning).
    pub cpu_affinity: Vec<usize>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            registration: RegistrationConfig {
                refresh: Duration::from_millis(1000),
                timeout: Duration::from_millis(10000),
                port: 14000,
                loopback: true,
                shm_transport_domain: String::new(),
            },
            network: NetworkConfig {
                enabled: false,
                local_broadcast: Ipv4Addr::new(127, 255, 255, 255),
                multicast_group: Ipv4Addr::new(239, 0, 0, 1),
                multicast_mask: Ipv4Addr::new(255, 255, 255, 240),
                multicast_ttl: 3,
                multicast_interface: Ipv4Addr::UNSPECIFIED,
                data_port: 14002,
            },
            shm_ring: ShmRingConfig {
                enabled: true,
                slot_count: 16,
                slot_size: 64 * 1024,
                huge_pages: false,
                huge_pages_path: PathBuf::from("/dev/hugepages"),
            },
            receive: ReceiveConfig { wait: WaitStrategy::Block },
            io: IoConfig { cpu_affinity: Vec::new() },
            source: None,
        }
    }
}
