//! The shoal monitor: every process and topic that registration shows (shoal's and eCAL's), with rate, bandwidth,
//! drops and per-connection latency, live in a window (egui) or as JSON lines (`--headless --json`).
//!
//! A thin client of shoal's public API ([`shoal::monitor`], [`shoal::dynamic`] for the inspector and the field plot, a [`shoal::Node`]):
//! [`source`] takes a [`Snapshot`](shoal::monitor::Snapshot) per refresh from the node (and the messages of the
//! inspected and the plotted topics through subscribers), [`model`] turns the snapshot into the
//! [`View`](model::View) both front ends show, [`signals`] keeps the plotted fields' values,
//! [`history`] keeps the last minutes of views (plots, freeze, scroll-back) and the events found by diffing them,
//! [`app`] draws the window (a file per view) and [`headless`] prints the lines. [`saved`] is the file the window's
//! Export… writes and `--open FILE` shows again, frozen. [`fixture`] is a scripted network for the tests and
//! screenshots.

pub mod app;
pub mod fixture;
pub mod headless;
pub mod history;
pub mod model;
pub mod saved;
pub mod signals;
pub mod source;
