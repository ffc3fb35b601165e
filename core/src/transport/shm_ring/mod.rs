//! Native shared-memory ring (being written).
