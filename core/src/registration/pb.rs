//! eCAL's registration protobuf (`ecal/core_pb/src/ecal/core/pb/*.proto`), written by hand
//! with `prost` derives. Field numbers follow eCAL 6.1.1; enum fields are plain `i32` so that
//! unknown values survive decoding. Fields eCAL no longer writes (5.x `Sample.host`, `ttype`,
//! `tdesc`, `attr`, Process 7–11, `TLayer.par_shm`, ...) are not declared and are skipped.
//!
//! Shoal extension that eCAL ignores: a [`TransportLayer`] with `type = 100`
//! ([`LAYER_SHOAL_RING`]) whose [`ConnectionPar`] carries field 100 [`LayerParShoal`].

/// `eCmdType::bct_set_sample` (data sample).
pub const CMD_SET_SAMPLE: i32 = 1;
/// `bct_reg_publisher`.
pub const CMD_REG_PUBLISHER: i32 = 2;
/// `bct_reg_subscriber`.
pub const CMD_REG_SUBSCRIBER: i32 = 3;
/// `bct_reg_process`.
pub const CMD_REG_PROCESS: i32 = 4;
/// `bct_reg_service`.
pub const CMD_REG_SERVICE: i32 = 5;
/// `bct_reg_client`.
pub const CMD_REG_CLIENT: i32 = 6;
/// `bct_unreg_publisher`.
pub const CMD_UNREG_PUBLISHER: i32 = 12;
/// `bct_unreg_subscriber`.
pub const CMD_UNREG_SUBSCRIBER: i32 = 13;
/// `bct_unreg_process`.
pub const CMD_UNREG_PROCESS: i32 = 14;
/// `bct_unreg_service`.
pub const CMD_UNREG_SERVICE: i32 = 15;
/// `bct_unreg_client`.
pub const CMD_UNREG_CLIENT: i32 = 16;

/// `eTLayerType::tl_ecal_udp_mc`.
pub const LAYER_UDP_MC: i32 = 1;
/// `tl_ecal_shm`.
pub const LAYER_SHM: i32 = 4;
/// `tl_ecal_tcp`.
pub const LAYER_TCP: i32 = 5;
/// Shoal's native shared-memory ring (not an eCAL value; eCAL ignores the entry).
pub const LAYER_SHOAL_RING: i32 = 100;

/// `eCAL.pb.Sample`: one registration or data sample.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// `eCmdType` (see the `CMD_*` constants).
    #[prost(int32, tag = "1")]
    pub cmd_type: i32,
    /// Process information (cmd 4 / 14).
    #[prost(message, optional, tag = "3")]
    pub process: Option<Process>,
    /// Topic information (cmd 2 / 3 / 12 / 13 and data samples).
    #[prost(message, optional, tag = "5")]
    pub topic: Option<Topic>,
    /// Topic content (data samples only).
    #[prost(message, optional, tag = "6")]
    pub content: Option<Content>,
    /// Alignment padding (TCP data samples).
    #[prost(bytes = "vec", tag = "8")]
    pub padding: Vec<u8>,
}

/// `eCAL.pb.ProcessState`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessState {
    /// `eProcessSeverity` (0 unknown, 1 healthy, 2 warning, 3 critical, 4 failed).
    #[prost(int32, tag = "1")]
    pub severity: i32,
    /// Free text.
    #[prost(string, tag = "2")]
    pub info: String,
    /// `eProcessSeverityLevel` (0 unknown, 1..5).
    #[prost(int32, tag = "3")]
    pub severity_level: i32,
}

/// `eCAL.pb.Process`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Process {
    /// Registration heartbeat counter.
    #[prost(int32, tag = "1")]
    pub registration_clock: i32,
    /// `gethostname()` of the process.
    #[prost(string, tag = "2")]
    pub host_name: String,
    /// Process id.
    #[prost(int32, tag = "3")]
    pub process_id: i32,
    /// Full executable path.
    #[prost(string, tag = "4")]
    pub process_name: String,
    /// Unit (node) name.
    #[prost(string, tag = "5")]
    pub unit_name: String,
    /// Command line.
    #[prost(string, tag = "6")]
    pub process_parameter: String,
    /// Process state.
    #[prost(message, optional, tag = "12")]
    pub state: Option<ProcessState>,
    /// `eTSyncState`.
    #[prost(int32, tag = "13")]
    pub time_sync_state: i32,
    /// Time synchronisation module name.
    #[prost(string, tag = "14")]
    pub time_sync_module_name: String,
    /// Bit mask of initialised eCAL components.
    #[prost(int32, tag = "15")]
    pub component_init_state: i32,
    /// Components as text, e.g. `pub|sub|log|time`.
    #[prost(string, tag = "16")]
    pub component_init_info: String,
    /// Runtime version string.
    #[prost(string, tag = "17")]
    pub ecal_runtime_version: String,
    /// SHM transport domain (defaults to the host name).
    #[prost(string, tag = "18")]
    pub shm_transport_domain: String,
    /// Where the configuration was loaded from.
    #[prost(string, tag = "19")]
    pub config_file_path: String,
}

/// `eCAL.pb.DataTypeInformation`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DataTypeInformation {
    /// Type name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Encoding (`proto`, `raw`, ...).
    #[prost(string, tag = "2")]
    pub encoding: String,
    /// Descriptor bytes.
    #[prost(bytes = "vec", tag = "3")]
    pub descriptor_information: Vec<u8>,
}

/// `eCAL.pb.LayerParUdpMC` (empty).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LayerParUdpMc {}

/// `eCAL.pb.LayerParShm`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LayerParShm {
    /// Memory file names of the publisher (one per buffer).
    #[prost(string, repeated, tag = "1")]
    pub memory_file_list: Vec<String>,
}

/// `eCAL.pb.LayerParTcp`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LayerParTcp {
    /// The publisher's listening port.
    #[prost(int32, tag = "1")]
    pub port: i32,
}

/// Shoal ring parameters (ConnectionPar field 100; unknown to eCAL).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LayerParShoal {
    /// Name of the ring segment.
    #[prost(string, tag = "1")]
    pub segment: String,
    /// Number of slots.
    #[prost(uint32, tag = "2")]
    pub slot_count: u32,
    /// Payload bytes per slot.
    #[prost(uint64, tag = "3")]
    pub slot_size: u64,
    /// Incremented each time the segment is recreated (growth).
    #[prost(uint32, tag = "4")]
    pub generation: u32,
    /// Name of the doorbell.
    #[prost(string, tag = "5")]
    pub doorbell: String,
}

/// `eCAL.pb.ConnnectionPar` (sic).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConnectionPar {
    /// UDP multicast parameters (empty).
    #[prost(message, optional, tag = "1")]
    pub layer_par_udpmc: Option<LayerParUdpMc>,
    /// SHM parameters.
    #[prost(message, optional, tag = "2")]
    pub layer_par_shm: Option<LayerParShm>,
    /// TCP parameters.
    #[prost(message, optional, tag = "4")]
    pub layer_par_tcp: Option<LayerParTcp>,
    /// Shoal ring parameters.
    #[prost(message, optional, tag = "100")]
    pub layer_par_shoal: Option<LayerParShoal>,
}

/// `eCAL.pb.TLayer`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TransportLayer {
    /// `eTLayerType` (see the `LAYER_*` constants).
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    /// Layer version (eCAL 6: 2; below 2 means "enabled").
    #[prost(int32, tag = "2")]
    pub version: i32,
    /// The layer is in use (5.x `confirmed`).
    #[prost(bool, tag = "3")]
    pub active: bool,
    /// Layer parameters.
    #[prost(message, optional, tag = "5")]
    pub par_layer: Option<ConnectionPar>,
    /// The layer is enabled on this entity.
    #[prost(bool, tag = "6")]
    pub enabled: bool,
}

/// `eCAL.pb.Statistics` (latency in µs).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Statistics {
    /// Number of samples.
    #[prost(uint64, tag = "1")]
    pub count: u64,
    /// Latest value.
    #[prost(double, tag = "2")]
    pub latest: f64,
    /// Minimum. Optional so that a real 0.0 is written: eCAL's default for a missing `min` is +∞, not 0.
    #[prost(double, optional, tag = "3")]
    pub min: Option<f64>,
    /// Maximum. Optional so that a real 0.0 is written: eCAL's default for a missing `max` is −∞, not 0.
    #[prost(double, optional, tag = "4")]
    pub max: Option<f64>,
    /// Mean.
    #[prost(double, tag = "5")]
    pub mean: f64,
    /// Variance.
    #[prost(double, tag = "6")]
    pub variance: f64,
}

/// `eCAL.pb.Topic`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Topic {
    /// Registration heartbeat counter.
    #[prost(int32, tag = "1")]
    pub registration_clock: i32,
    /// Host name.
    #[prost(string, tag = "2")]
    pub host_name: String,
    /// Process id.
    #[prost(int32, tag = "3")]
    pub process_id: i32,
    /// Executable path.
    #[prost(string, tag = "4")]
    pub process_name: String,
    /// Unit name.
    #[prost(string, tag = "5")]
    pub unit_name: String,
    /// Entity id as a decimal u64 string.
    #[prost(string, tag = "6")]
    pub topic_id: String,
    /// Topic name.
    #[prost(string, tag = "7")]
    pub topic_name: String,
    /// Direction (always empty in 6.1.1).
    #[prost(string, tag = "8")]
    pub direction: String,
    /// Transport layers.
    #[prost(message, repeated, tag = "12")]
    pub transport_layer: Vec<TransportLayer>,
    /// Topic size in bytes.
    #[prost(int32, tag = "13")]
    pub topic_size: i32,
    /// Connected local entities.
    #[prost(int32, tag = "16")]
    pub connections_local: i32,
    /// Connected external entities.
    #[prost(int32, tag = "17")]
    pub connections_external: i32,
    /// Dropped messages.
    #[prost(int32, tag = "18")]
    pub message_drops: i32,
    /// Last data id.
    #[prost(int64, tag = "19")]
    pub data_id: i64,
    /// Data clock (samples sent / received).
    #[prost(int64, tag = "20")]
    pub data_clock: i64,
    /// Data frequency in mHz.
    #[prost(int32, tag = "21")]
    pub data_frequency: i32,
    /// SHM transport domain.
    #[prost(string, tag = "28")]
    pub shm_transport_domain: String,
    /// Data type information.
    #[prost(message, optional, tag = "30")]
    pub datatype_information: Option<DataTypeInformation>,
    /// Latency statistics in µs (6.1).
    #[prost(message, optional, tag = "31")]
    pub data_latency_us: Option<Statistics>,
}

/// `eCAL.pb.Content`: the payload part of a data sample.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Content {
    /// User filter id.
    #[prost(int64, tag = "1")]
    pub id: i64,
    /// Per-publisher send counter.
    #[prost(int64, tag = "2")]
    pub clock: i64,
    /// Send time, µs since the epoch.
    #[prost(int64, tag = "3")]
    pub time: i64,
    /// Payload bytes.
    #[prost(bytes = "vec", tag = "4")]
    pub payload: Vec<u8>,
    /// Payload size (0 on UDP, payload length on TCP).
    #[prost(int32, tag = "6")]
    pub size: i32,
    /// `topic_id ^ (clock << 1)`.
    #[prost(int64, tag = "7")]
    pub hash: i64,
}
