//! Registration: eCAL-compatible discovery as a sans-IO state machine.
//!
//! - [`codec`]: model ⇄ eCAL's protobuf ([`crate::wire::pb`]), `"reg_sample"` framing.
//! - [`Registrar`]: periodic registration of the local process and entities, the registry of
//!   remote processes, topics and service servers and clients with expiry, and matching (see its docs).
//! - `repeat`: a repeated registration recognised from its bytes, before decoding.
//! - `slots`: the map the registry keeps remote topics and processes in: a repeat finds its entry at a remembered
//!   slot, without a search by key.

pub mod codec;
pub mod limits;
pub mod model;
mod pbwalk;
mod registrar;
mod repeat;
mod services;
mod slots;

#[cfg(test)]
mod tests;

pub use codec::{DecodeError, decode_registration, encode_registration};
pub use model::{
    Direction, EntityKey, Event, Identity, Layer, LayerKind, LayerPar, LocalService, LocalTopic, MethodInfo,
    RegistrationCounters, RemoteProcess, RemoteService, RemoteTopic, SERVICE_PROTOCOL_VERSION, ServiceRole, ShoalPar,
    TopicStats,
};
pub use registrar::{ProtectedTopics, Registrar};
pub use services::ServerDirectory;
