//! Transports.
#[allow(unsafe_code)]
pub mod shm_ring;
