//! eCAL's protobuf (`eCAL.pb.Sample` and the messages it contains: registration samples and the data samples of
//! the UDP and TCP layers), generated at build time by `core/build.rs` (protox and prost-build, no `protoc`) from the `.proto` files in
//! `core/proto/`:
//!
//! - `ecal/core/pb/{ecal,process,topic,layer,datatype,service}.proto`: eCAL 6.1.1's messages, with its
//!   package, names and field numbers, but only the fields shoal reads or writes. Fields eCAL no
//!   longer writes (5.x `Sample.host`, `ttype`, `tdesc`, `attr`, Process 7–11, `TLayer.par_shm`, ...)
//!   are not declared and are skipped on decoding. `service.proto` has the registration of servers and
//!   clients (`Service`, `Client`, `Method`) and the payloads of eCAL's service protocol (`Request`,
//!   `Response`).
//! - `shoal/shoal_layer.proto`: shoal's extension that eCAL ignores, a [`TransportLayer`] with
//!   `type = 100` ([`LAYER_SHOAL_RING`]) whose [`ConnectionPar`] carries field 100
//!   [`LayerParShoal`]. proto3 cannot extend a message from another file, so `layer.proto` declares
//!   that field with the type imported from the shoal file.
//!
//! prost generates enum fields as plain `i32` (proto3 enums are open), so unknown values survive
//! decoding; the `CMD_*` and `LAYER_*` constants below name the values shoal uses. [`parse_topic_id`] reads a
//! `topic_id` string as eCAL does.

/// The generated code, one module per protobuf package as prost-build expects (its cross-package
/// paths are relative: `eCAL.pb` refers to `super::super::shoal`). Everything is re-exported below.
mod generated {
    pub(crate) mod e_cal {
        pub(crate) mod pb {
            include!(concat!(env!("OUT_DIR"), "/e_cal.pb.rs"));
        }
    }
    pub(crate) mod shoal {
        include!(concat!(env!("OUT_DIR"), "/shoal.rs"));
    }
}

pub use generated::e_cal::pb::*;
pub use generated::shoal::*;

/// `eCmdType::bct_set_sample` (data sample).
pub const CMD_SET_SAMPLE: i32 = ECmdType::BctSetSample as i32;
/// `bct_reg_publisher`.
pub const CMD_REG_PUBLISHER: i32 = ECmdType::BctRegPublisher as i32;
/// `bct_reg_subscriber`.
pub const CMD_REG_SUBSCRIBER: i32 = ECmdType::BctRegSubscriber as i32;
/// `bct_reg_process`.
pub const CMD_REG_PROCESS: i32 = ECmdType::BctRegProcess as i32;
/// `bct_reg_service`.
pub const CMD_REG_SERVICE: i32 = ECmdType::BctRegService as i32;
/// `bct_reg_client`.
pub const CMD_REG_CLIENT: i32 = ECmdType::BctRegClient as i32;
/// `bct_unreg_publisher`.
pub const CMD_UNREG_PUBLISHER: i32 = ECmdType::BctUnregPublisher as i32;
/// `bct_unreg_subscriber`.
pub const CMD_UNREG_SUBSCRIBER: i32 = ECmdType::BctUnregSubscriber as i32;
/// `bct_unreg_process`.
pub const CMD_UNREG_PROCESS: i32 = ECmdType::BctUnregProcess as i32;
/// `bct_unreg_service`.
pub const CMD_UNREG_SERVICE: i32 = ECmdType::BctUnregService as i32;
/// `bct_unreg_client`.
pub const CMD_UNREG_CLIENT: i32 = ECmdType::BctUnregClient as i32;

/// `eTransportLayerType::tl_ecal_udp_mc`.
pub const LAYER_UDP_MC: i32 = ETransportLayerType::TlEcalUdpMc as i32;
/// `tl_ecal_shm`.
pub const LAYER_SHM: i32 = ETransportLayerType::TlEcalShm as i32;
/// `tl_ecal_tcp`.
pub const LAYER_TCP: i32 = ETransportLayerType::TlEcalTcp as i32;
/// `shoal.ShoalLayerType::tl_shoal_ring`: shoal's native shared-memory ring (not an eCAL value; eCAL
/// ignores the entry).
pub const LAYER_SHOAL_RING: i32 = ShoalLayerType::TlShoalRing as i32;

/// A topic id that is not a decimal u64 (eCAL's `std::stoull` throws and the sample is dropped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("topic id {0:?} is not a decimal u64")]
pub struct TopicIdError(pub String);

/// Parses a topic id the way `std::stoull` does: optional leading whitespace and `+`, then
/// decimal digits up to the first non-digit; no digits or overflow is an error.
pub fn parse_topic_id(id: &str) -> Result<u64, TopicIdError> {
    let s = id.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let s = s.strip_prefix('+').unwrap_or(s);
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    s[..digits].parse::<u64>().map_err(|_| TopicIdError(id.to_owned()))
}
