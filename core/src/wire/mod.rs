//! Byte formats (being written).
