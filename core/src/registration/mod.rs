//! Registration (being written).
