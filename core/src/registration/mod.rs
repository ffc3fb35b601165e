//! Registration: eCAL-compatible discovery as a sans-IO state machine.
//!
//! - [`pb`]: eCAL's registration protobuf (`eCAL.pb.Sample` and friends), generated from `core/proto/`.
//! - [`codec`]: model ⇄ protobuf, `"reg_sample"` framing, topic id parsing.
//! - [`Registrar`]: periodic registration of the local process and entities, the registry of
//!   remote processes and topics with expiry, and matching (see its docs).

pub mod codec;
pub mod limits;
pub mod model;
pub mod pb;
mod registrar;

#[cfg(test)]
mod tests;

pub use codec::{DecodeError, TopicIdError, decode_registration, encode_registration, parse_topic_id};
pub use model::{
    Direction, EntityKey, Event, Identity, Layer, LayerKind, LayerPar, LocalTopic, RegistrationCounters, RemoteProcess,
    RemoteTopic, ShoalPar, TopicStats,
};
pub use registrar::{ProtectedTopics, Registrar};
