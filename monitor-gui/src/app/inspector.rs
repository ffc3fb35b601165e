//! The Inspector tab: the selected topic's latest messages, decoded (protobuf as a tree, text as text) or as hex,
//! with pause and step; a click on a numeric field of the tree plots it (the Plot tab), a click again stops.

use std::collections::VecDeque;
use std::sync::Arc;

use shoal::TypeInfo;
use shoal::dynamic::{DynamicDecoder, RawView};
use shoal::monitor::printable as shown;

use super::fieldplot::signal_color;
use super::widgets::{STALE_TEXT, clock, health_color};
use super::{MonitorApp, Tab};
use crate::model::{Health, View, fmt_bytes};
use crate::signals::{FieldPath, Seg, Signals, numeric};
use crate::source::Message;

/// The inspector keeps this many messages to step through.
pub const INSPECTOR_KEEP: usize = 100;

/// The inspector: the messages of the selected topic, a decoder per type, pause and step.
#[derive(Debug, Default)]
pub(super) struct Inspector {
    /// The topic whose messages are kept (they stay while another tab is shown, until another topic is selected).
    pub(super) topic: Option<Arc<str>>,
    /// The topic subscribed to now: the kept one while the Inspector tab is shown, none otherwise.
    subscribed: Option<Arc<str>>,
    messages: VecDeque<Message>,
    /// Paused: `messages` and the shown one stay as they are until Resume.
    pub(super) paused: bool,
    /// Index into `messages` while paused.
    cursor: usize,
    /// Messages that arrived while paused (the newest [`INSPECTOR_KEEP`]), added on Resume.
    held: VecDeque<Message>,
    /// Messages that arrived while paused beyond `held`'s bound.
    held_over: u64,
    decoder: Option<(Arc<TypeInfo>, Result<DynamicDecoder, String>)>,
    /// The decoded message shown: (clock, publisher) → JSON or error.
    decoded: Option<((u64, u64), Decoded)>,
    incoming: Vec<Message>,
    pub(super) mode: InspectMode,
}

#[derive(Debug, Clone)]
enum Decoded {
    Tree(serde_json::Value),
    Raw(RawView),
    Error(String),
}

/// How the inspector shows a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum InspectMode {
    /// Tree for protobuf, text for UTF-8, hex otherwise.
    #[default]
    Auto,
    Hex,
}

impl Inspector {
    /// Keeps `m` as the newest message, dropping the oldest beyond [`INSPECTOR_KEEP`].
    fn keep(&mut self, m: Message) {
        if self.messages.len() == INSPECTOR_KEEP {
            self.messages.pop_front();
        }
        self.messages.push_back(m);
    }

    /// Ends a pause: the messages held meanwhile join the kept ones and the newest is shown.
    fn resume(&mut self) {
        self.paused = false;
        self.held_over = 0;
        while let Some(m) = self.held.pop_front() {
            self.keep(m);
        }
    }
}

impl MonitorApp {
    /// Follows the inspected topic (while the Inspector tab is shown) and the plotted ones, and hands each message
    /// taken to the inspector and to the signals of its topic.
    pub(super) fn poll_messages(&mut self) {
        // Another topic selected: what was kept of the last one goes. Another tab: the subscription ends (it costs
        // the publishers a connection) but the kept messages stay for when the Inspector is shown again.
        if self.state.selected.is_some() && self.state.selected != self.inspector.topic {
            self.inspector = Inspector {
                topic: self.state.selected.clone(),
                subscribed: self.inspector.subscribed.take(),
                mode: self.inspector.mode,
                ..Inspector::default()
            };
        }
        self.inspector.subscribed =
            if matches!(self.state.tab, Tab::Inspector) { self.state.selected.clone() } else { None };
        let mut wanted = self.signals.topics();
        if let Some(t) = &self.inspector.subscribed
            && !wanted.contains(t)
        {
            wanted.push(t.clone());
            wanted.sort();
        }
        if wanted != self.followed {
            self.messages.follow(&wanted);
            self.followed = wanted;
        }
        if self.followed.is_empty() {
            return;
        }
        let mut incoming = std::mem::take(&mut self.inspector.incoming);
        self.messages.poll(&mut incoming);
        for m in incoming.drain(..) {
            self.signals.record(&m);
            if self.inspector.subscribed.as_ref() != Some(&m.topic) {
                continue;
            }
            if self.inspector.paused {
                if self.inspector.held.len() == INSPECTOR_KEEP {
                    self.inspector.held.pop_front();
                    self.inspector.held_over += 1;
                }
                self.inspector.held.push_back(m);
            } else {
                self.inspector.keep(m);
            }
        }
        self.inspector.incoming = incoming;
    }

    pub(super) fn inspector_ui(&mut self, ui: &mut egui::Ui, view: &View) {
        let Some(topic) = self.state.selected.clone() else {
            ui.label("Select a topic in the Overview (click its name) to inspect its messages.");
            return;
        };
        if self.inspector.subscribed.as_deref() != Some(&*topic) {
            self.poll_messages();
        }
        // Whether anyone publishes it now (the topic's row is gone, or has no publisher left).
        let publishers = view.topic(&topic).map_or(0, |t| t.publishers);
        let n = self.inspector.messages.len();
        ui.horizontal(|ui| {
            ui.heading(shown(&topic));
            ui.separator();
            if ui.button(if self.inspector.paused { "Resume" } else { "Pause" }).clicked() {
                if self.inspector.paused {
                    self.inspector.resume();
                } else {
                    self.inspector.paused = true;
                    self.inspector.cursor = n.saturating_sub(1);
                }
            }
            if self.inspector.paused {
                if ui.add_enabled(self.inspector.cursor > 0, egui::Button::new("< Previous")).clicked() {
                    self.inspector.cursor -= 1;
                }
                if ui.add_enabled(self.inspector.cursor + 1 < n, egui::Button::new("Next >")).clicked() {
                    self.inspector.cursor += 1;
                }
            }
            ui.separator();
            if ui.selectable_label(self.inspector.mode == InspectMode::Auto, "Decoded").clicked() {
                self.inspector.mode = InspectMode::Auto;
            }
            if ui.selectable_label(self.inspector.mode == InspectMode::Hex, "Hex").clicked() {
                self.inspector.mode = InspectMode::Hex;
            }
        });
        let index =
            if self.inspector.paused { self.inspector.cursor.min(n.saturating_sub(1)) } else { n.saturating_sub(1) };
        let Some(msg) = self.inspector.messages.get(index).cloned() else {
            ui.label(if publishers == 0 {
                "No message received: the topic has no publisher now."
            } else {
                "No message received yet."
            });
            return;
        };
        if publishers == 0 {
            ui.colored_label(
                STALE_TEXT,
                format!("No publisher now: these are the last {n} messages received while it had one."),
            );
        }
        if self.inspector.paused {
            let newer = self.inspector.held.len() as u64 + self.inspector.held_over;
            ui.label(format!("Paused: {newer} newer messages arrived since (shown on Resume)."));
        }
        ui.label(format!(
            "message {} of {} kept · clock {} · publisher {:x} · {} · type {} ({}) · sent {}",
            index + 1,
            n,
            msg.clock,
            msg.publisher_id,
            fmt_bytes(msg.payload.len() as f64),
            shown(&msg.type_info.name),
            if msg.type_info.encoding.is_empty() { "raw".into() } else { shown(&msg.type_info.encoding) },
            clock(msg.send_time_us as f64 / 1e6),
        ));
        if let Some(note) = &self.plot_note {
            ui.colored_label(health_color(Health::Warning), note);
        }
        ui.separator();
        let decoded = self.decode(&msg);
        let mut picked = None;
        let tree = Tree { topic: &topic, signals: &self.signals };
        egui::ScrollArea::vertical().auto_shrink(false).show(ui, |ui| match (self.inspector.mode, decoded) {
            (InspectMode::Auto, Decoded::Tree(v)) => {
                ui.weak("Click a number to plot it (the Plot tab), again to stop.");
                tree.show(ui, "message", &v, &mut Vec::new(), &mut picked);
            }
            (InspectMode::Auto, Decoded::Raw(r)) if r.text.is_some() => {
                ui.label("Text:");
                // Line by line: the payload's lines stay lines, anything else that would not show as itself
                // (controls, bidirectional overrides) is escaped.
                let text = r.text.unwrap_or_default();
                let lines: Vec<_> = text.split('\n').map(shown).collect();
                ui.monospace(lines.join("\n"));
            }
            (InspectMode::Auto, Decoded::Error(e)) => {
                ui.colored_label(health_color(Health::Error), format!("cannot decode: {e}"));
                hex_dump(ui, &msg.payload);
            }
            _ => hex_dump(ui, &msg.payload),
        });
        if let Some(path) = picked {
            self.toggle_signal(&topic, path);
        }
    }

    fn decode(&mut self, msg: &Message) -> Decoded {
        let key = (msg.clock, msg.publisher_id);
        if let Some((k, d)) = &self.inspector.decoded
            && *k == key
        {
            return d.clone();
        }
        let stale = self.inspector.decoder.as_ref().is_none_or(|(ti, _)| **ti != *msg.type_info);
        if stale {
            let dec = DynamicDecoder::new(&msg.type_info).map_err(|e| e.to_string());
            self.inspector.decoder = Some((msg.type_info.clone(), dec));
        }
        let d = match &self.inspector.decoder {
            Some((_, Ok(dec))) if dec.message_descriptor().is_some() => match dec.decode_to_json(&msg.payload) {
                Ok(v) => Decoded::Tree(v),
                Err(e) => Decoded::Error(e.to_string()),
            },
            Some((_, Err(e))) => Decoded::Error(e.clone()),
            _ => Decoded::Raw(RawView::new(&msg.type_info, &msg.payload)),
        };
        self.inspector.decoded = Some((key, d.clone()));
        d
    }
}

/// The decoded message as a tree; its numeric leaves are clickable, the plotted ones in their signal's colour.
struct Tree<'a> {
    topic: &'a str,
    signals: &'a Signals,
}

impl Tree<'_> {
    fn show(
        &self,
        ui: &mut egui::Ui,
        key: &str,
        v: &serde_json::Value,
        path: &mut Vec<Seg>,
        picked: &mut Option<FieldPath>,
    ) {
        use serde_json::Value;
        let depth = path.len();
        match v {
            Value::Object(m) => {
                egui::CollapsingHeader::new(format!("{} {{{}}}", shown(key), m.len()))
                    .id_salt((key, depth, m.len()))
                    .default_open(depth < 4)
                    .show(ui, |ui| {
                        for (k, x) in m {
                            path.push(Seg::Key(k.clone()));
                            self.show(ui, k, x, path, picked);
                            path.pop();
                        }
                    });
            }
            Value::Array(a) => {
                egui::CollapsingHeader::new(format!("{} [{}]", shown(key), a.len()))
                    .id_salt((key, depth, a.len()))
                    .default_open(depth < 4 && a.len() <= 32)
                    .show(ui, |ui| {
                        for (i, x) in a.iter().enumerate().take(1000) {
                            path.push(Seg::Index(i));
                            self.show(ui, &format!("[{i}]"), x, path, picked);
                            path.pop();
                        }
                    });
            }
            scalar => {
                let text = format!("{}: {}", shown(key), shown(&scalar.to_string()));
                if numeric(scalar).is_none() {
                    ui.monospace(text);
                    return;
                }
                let field = FieldPath(path.clone());
                let plotted = self.signals.list().iter().position(|s| &*s.topic == self.topic && s.path == field);
                let mut rich = egui::RichText::new(text).monospace();
                if let Some(i) = plotted {
                    rich = rich.color(signal_color(i));
                }
                let r = ui.add(egui::Label::new(rich).sense(egui::Sense::click()));
                // Names from the network (the topic, a map's keys) shown through the one escaping.
                let name = shown(&format!("{}:{field}", self.topic)).into_owned();
                let r = r.on_hover_text(match plotted {
                    Some(_) => format!("{name} is plotted: click to stop"),
                    None => format!("Click to plot {name}"),
                });
                if r.clicked() {
                    *picked = Some(field);
                }
            }
        }
    }
}

fn hex_dump(ui: &mut egui::Ui, bytes: &[u8]) {
    let shown = &bytes[..bytes.len().min(shoal::dynamic::RAW_VIEW_LIMIT)];
    let mut s = String::with_capacity(shown.len() * 4);
    for (i, chunk) in shown.chunks(16).enumerate() {
        s.push_str(&format!("{:06x}  ", i * 16));
        for b in chunk {
            s.push_str(&format!("{b:02x} "));
        }
        for _ in chunk.len()..16 {
            s.push_str("   ");
        }
        s.push(' ');
        s.extend(chunk.iter().map(|&b| if b.is_ascii_graphic() || b == b' ' { b as char } else { '.' }));
        s.push('\n');
    }
    if bytes.len() > shown.len() {
        s.push_str(&format!("… {} more bytes\n", bytes.len() - shown.len()));
    }
    ui.monospace(s);
}
