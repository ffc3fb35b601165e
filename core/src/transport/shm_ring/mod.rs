//! shoal's native lock-free shared-memory ring.
//!
//! - One segment per publisher (`/dev/shm/shoal_<pid>_<unique>_g<generation>`, or on a
//!   hugetlbfs mount), written by one [`RingWriter`], read in place by any number of
//!   [`RingReader`]s in any process. Each slot is a seqlock: readers verify after reading that
//!   the writer did not overwrite the slot, and count every lost sample as a drop. The writer
//!   never locks; by default it never waits either, so a crashed reader cannot block anybody. A writer made
//!   reliable ([`RingWriter::set_flow_control`]) waits, up to a timeout, while a reliable reader
//!   ([`RingReader::open_reliable`]) is a full ring behind; dead and stalled readers are taken out of that flow
//!   control (`flow.rs`), so even then nobody is blocked for longer than the timeout.
//! - A copying write of 64 KiB or more is streamed: its description is complete and announced before the payload
//!   is copied in 16 KiB parts, each announced as it is done, and a reader that finds it under way copies the parts
//!   out as they come, accepting the sample once it is published (`writer.rs`, `reader.rs`).
//! - A message larger than the slots makes the writer move to generation + 1 with bigger slots;
//!   the old segment is marked superseded (with the path of the new one) and readers follow.
//!   Sequence numbers are continuous across generations. Old generation files stay linked until
//!   the writer is dropped (at most as many bytes as the current one, since sizes double), so
//!   that a late reader can always follow the chain.
//! - One [`Doorbell`] (futex word in a tiny segment `/dev/shm/shoal_db_<pid>_<unique>`) per
//!   subscribing process; publishers ring it through a [`DoorbellRemote`] after publishing, which
//!   costs a syscall only when a thread of that process sleeps. With several sleeping subscriber processes a
//!   publisher hands its doorbells over ([`Ringers::hand_over`]) to a thread that rings them for it.
//! - [`remove_stale_segments`] deletes files left behind by dead processes.
//!
//! Names passed between processes ([`RingWriter::segment_name`], [`Doorbell::name`]) are
//! absolute paths.

mod doorbell;
mod flow;
mod layout;
mod pick;
mod reader;
mod segment;
mod writer;

#[cfg(test)]
mod tests;

pub use doorbell::{
    Doorbell, DoorbellCreateError, DoorbellOpenError, DoorbellRemote, DoorbellWaitError, LocalBell, LocalWaiter, Pacer,
    PollState, Ringers, WaiterRegistration, WakeReason, note_publish,
};
pub use flow::FlowStats;
pub use reader::{NextSlotWatch, ReadOutcome, RingOpenError, RingReader, SampleInfo, SampleView};
pub use segment::{CleanupError, SHM_DIR, remove_stale_segments};
pub use writer::{CommitError, GROWN_MIN_SLOTS, Published, RingCreateError, RingWriter, SlotError, geometry_for};
