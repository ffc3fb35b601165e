//! The field plot's signals: numeric fields of decoded messages (a topic and a path such as `pose.position.x` or
//! `ranges[3]`), each with its values over the last [`SIGNAL_SPAN_S`] seconds in a bounded ring.
//!
//! Bounds: at most [`MAX_SIGNALS`] signals; per signal at most [`MAX_POINTS`] points. Points closer in time than
//! one bucket ([`BUCKET_S`], the span over half the points) are folded into the bucket's lowest and highest value,
//! so a topic at 1 kHz keeps 5 minutes in the same memory as one at 60 Hz, and its peaks stay. Nothing is lost
//! silently: messages that do not decode and messages without the field are counted per signal.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use shoal::TypeInfo;
use shoal::dynamic::DynamicDecoder;

use crate::source::Message;

/// Signals plotted at once, at most.
pub const MAX_SIGNALS: usize = 16;
/// Points kept per signal, at most.
pub const MAX_POINTS: usize = 20_000;
/// How long a signal's points are kept, seconds (the longest plot window).
pub const SIGNAL_SPAN_S: f64 = 300.0;
/// The width of a bucket whose points are folded into its lowest and highest one, seconds.
pub const BUCKET_S: f64 = SIGNAL_SPAN_S / (MAX_POINTS / 2) as f64;

/// One step of a field path: a field (or map key) by name, or an element of a repeated field by index.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Seg {
    /// A field of a message, or a key of a map.
    Key(String),
    /// An element of a repeated field.
    Index(usize),
}

/// Where a value is in a decoded message: `pose.position.x`, `ranges[3]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct FieldPath(pub Vec<Seg>);

impl FieldPath {
    /// Parses `a.b[3].c` (fields separated by dots, indices in brackets).
    pub fn parse(s: &str) -> Result<FieldPath, String> {
        let mut segs = Vec::new();
        for part in s.split('.') {
            let (name, mut rest) = match part.find('[') {
                Some(i) => (&part[..i], &part[i..]),
                None => (part, ""),
            };
            if name.is_empty() && (segs.is_empty() || rest.is_empty()) {
                return Err(format!("`{s}`: an empty field name"));
            }
            if !name.is_empty() {
                segs.push(Seg::Key(name.to_owned()));
            }
            while !rest.is_empty() {
                let end = rest.find(']').ok_or_else(|| format!("`{s}`: `[` without `]`"))?;
                let i = rest[1..end].parse().map_err(|_| format!("`{s}`: `{}` is not an index", &rest[1..end]))?;
                segs.push(Seg::Index(i));
                rest = &rest[end + 1..];
                if !rest.is_empty() && !rest.starts_with('[') {
                    return Err(format!("`{s}`: `{rest}` after an index"));
                }
            }
        }
        Ok(FieldPath(segs))
    }

    /// The value at this path in `v`.
    pub fn get<'a>(&self, v: &'a Value) -> Option<&'a Value> {
        self.0.iter().try_fold(v, |v, s| match s {
            Seg::Key(k) => v.get(k.as_str()),
            Seg::Index(i) => v.get(*i),
        })
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            match s {
                Seg::Key(k) if i == 0 => write!(f, "{k}")?,
                Seg::Key(k) => write!(f, ".{k}")?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// A value of a decoded message as a number to plot: numbers, booleans (0 and 1), and the proto3 JSON mapping's
/// `"NaN"`, `"Infinity"` and `"-Infinity"`; `None` for anything else (texts, messages, lists, null).
pub fn numeric(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// One plotted field.
#[derive(Debug, Clone)]
pub struct Signal {
    /// Its topic.
    pub topic: Arc<str>,
    /// Its field.
    pub path: FieldPath,
    /// `topic:path`, as the legend shows it.
    pub label: String,
    /// (receive time, seconds since the epoch; value), oldest first.
    points: VecDeque<(f64, f64)>,
    /// The bucket of the newest points and how many of them are in it (1 or 2).
    bucket: Option<(i64, usize)>,
    /// The newest value taken and when (it may have been folded away from `points`).
    pub last: Option<(f64, f64)>,
    /// Messages of the topic taken since the signal was added.
    pub messages: u64,
    /// Of them, messages that did not decode.
    pub undecodable: u64,
    /// Of them, decoded messages without this field, or with a value that is not a number there.
    pub missing: u64,
    /// Values folded into their bucket's lowest and highest.
    pub folded: u64,
}

impl Signal {
    fn new(topic: Arc<str>, path: FieldPath) -> Signal {
        let label = format!("{topic}:{path}");
        Signal {
            topic,
            path,
            label,
            points: VecDeque::new(),
            bucket: None,
            last: None,
            messages: 0,
            undecodable: 0,
            missing: 0,
            folded: 0,
        }
    }

    /// The kept points, oldest first.
    pub fn points(&self) -> &VecDeque<(f64, f64)> {
        &self.points
    }

    /// Adds the value `v` taken at `t` (seconds since the epoch).
    pub fn push(&mut self, t: f64, v: f64) {
        self.last = Some((t, v));
        let b = (t / BUCKET_S).floor() as i64;
        match self.bucket {
            // The same bucket (or an earlier time than its start, from a clock step back): keep its lowest and
            // highest value, in time order.
            Some((cur, n)) if b <= cur => {
                self.folded += 1;
                let start = self.points.len() - n;
                let mut run: Vec<(f64, f64)> = self.points.drain(start..).collect();
                run.push((t, v));
                let lo = run.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap_or((t, v));
                let hi = run.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap_or((t, v));
                let (a, z) = if lo.0 <= hi.0 { (lo, hi) } else { (hi, lo) };
                self.points.push_back(a);
                let kept = if a == z {
                    1
                } else {
                    self.points.push_back(z);
                    2
                };
                self.bucket = Some((cur, kept));
            }
            _ => {
                self.points.push_back((t, v));
                self.bucket = Some((b, 1));
            }
        }
        let newest = self.points.back().map_or(t, |p| p.0);
        while self.points.len() > MAX_POINTS || self.points.front().is_some_and(|p| p.0 < newest - SIGNAL_SPAN_S) {
            self.points.pop_front();
        }
        let n = self.points.len();
        if let Some((_, k)) = &mut self.bucket {
            *k = (*k).min(n);
        }
    }
}

/// Why a field could not be added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddError {
    /// [`MAX_SIGNALS`] are plotted already.
    Full,
    /// This field of this topic is plotted already.
    Already,
}

impl fmt::Display for AddError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddError::Full => write!(f, "at most {MAX_SIGNALS} signals are plotted: remove one first"),
            AddError::Already => write!(f, "this field is plotted already"),
        }
    }
}

/// A topic's decoder: the type it was made for, and the decoder or why there is none.
type Decoder = (Arc<TypeInfo>, Result<DynamicDecoder, String>);

/// The plotted signals and a decoder per topic.
#[derive(Debug, Default)]
pub struct Signals {
    list: Vec<Signal>,
    decoders: HashMap<Arc<str>, Decoder>,
    /// Counts changes of the points (the plot's decimated series are found again when it changes).
    generation: u64,
}

impl Signals {
    /// The signals, in the order they were added.
    pub fn list(&self) -> &[Signal] {
        &self.list
    }

    /// No signal.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Counts changes of the signals and their points.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether `path` of `topic` is plotted.
    pub fn contains(&self, topic: &str, path: &FieldPath) -> bool {
        self.list.iter().any(|s| &*s.topic == topic && s.path == *path)
    }

    /// Plots `path` of `topic` from the next message on.
    pub fn add(&mut self, topic: &str, path: FieldPath) -> Result<(), AddError> {
        if self.contains(topic, &path) {
            return Err(AddError::Already);
        }
        if self.list.len() >= MAX_SIGNALS {
            return Err(AddError::Full);
        }
        let topic = self.list.iter().find(|s| &*s.topic == topic).map_or_else(|| Arc::from(topic), |s| s.topic.clone());
        self.list.push(Signal::new(topic, path));
        self.generation += 1;
        Ok(())
    }

    /// Stops plotting signal `i`.
    pub fn remove(&mut self, i: usize) {
        if i < self.list.len() {
            self.list.remove(i);
            self.generation += 1;
            let list = &self.list;
            self.decoders.retain(|t, _| list.iter().any(|s| s.topic == *t));
        }
    }

    /// Stops plotting every signal.
    pub fn clear(&mut self) {
        self.list.clear();
        self.decoders.clear();
        self.generation += 1;
    }

    /// The signals' topics, sorted, each once.
    pub fn topics(&self) -> Vec<Arc<str>> {
        let mut t: Vec<Arc<str>> = self.list.iter().map(|s| s.topic.clone()).collect();
        t.sort();
        t.dedup();
        t
    }

    /// Takes message `m` into the signals of its topic: decoded once, each signal's field read from it.
    pub fn record(&mut self, m: &Message) {
        if !self.list.iter().any(|s| s.topic == m.topic) {
            return;
        }
        let t = m.received_at.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let dec = match self.decoders.get(&m.topic) {
            Some((ti, _)) if **ti == *m.type_info => self.decoders.get(&m.topic),
            _ => {
                let dec = DynamicDecoder::new(&m.type_info).map_err(|e| e.to_string());
                self.decoders.insert(m.topic.clone(), (m.type_info.clone(), dec));
                self.decoders.get(&m.topic)
            }
        };
        let decoded = match dec {
            Some((_, Ok(d))) if d.message_descriptor().is_some() => d.decode_to_json(&m.payload).ok(),
            _ => None,
        };
        self.generation += 1;
        for s in self.list.iter_mut().filter(|s| s.topic == m.topic) {
            s.messages += 1;
            let Some(v) = &decoded else {
                s.undecodable += 1;
                continue;
            };
            match s.path.get(v).and_then(numeric) {
                Some(x) => s.push(t, x),
                None => s.missing += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_print_and_find_values() {
        let p = FieldPath::parse("pose.position.x").unwrap();
        assert_eq!(p.to_string(), "pose.position.x");
        let r = FieldPath::parse("scan.ranges[3]").unwrap();
        assert_eq!(r.0, vec![Seg::Key("scan".into()), Seg::Key("ranges".into()), Seg::Index(3)]);
        assert_eq!(r.to_string(), "scan.ranges[3]");
        assert_eq!(FieldPath::parse("m[1][2].v").unwrap().to_string(), "m[1][2].v");
        for bad in ["", "a..b", "a[", "a[x]", "a[1]b"] {
            assert!(FieldPath::parse(bad).is_err(), "{bad}");
        }
        let v = serde_json::json!({"pose": {"position": {"x": 1.5}}, "scan": {"ranges": [0, 1, 2, 3.25]}, "ok": true,
            "name": "n", "bad": "NaN"});
        assert_eq!(p.get(&v).and_then(numeric), Some(1.5));
        assert_eq!(r.get(&v).and_then(numeric), Some(3.25));
        assert_eq!(FieldPath::parse("ok").unwrap().get(&v).and_then(numeric), Some(1.0));
        assert_eq!(FieldPath::parse("name").unwrap().get(&v).and_then(numeric), None);
        assert!(FieldPath::parse("bad").unwrap().get(&v).and_then(numeric).is_some_and(f64::is_nan));
        assert_eq!(FieldPath::parse("scan.ranges[9]").unwrap().get(&v), None);
    }

    /// Five minutes and more at 1 kHz stay within the bound, cover the last five minutes, and keep every peak.
    #[test]
    fn a_signal_keeps_at_most_max_points_over_the_span_with_its_peaks() {
        let mut s = Signal::new("/t".into(), FieldPath::parse("x").unwrap());
        let t0 = 1_700_000_000.0;
        let n = 400_000; // 400 s at 1 kHz
        for i in 0..n {
            let t = t0 + f64::from(i) / 1000.0;
            // A spike every 10 s.
            let v = if i % 10_000 == 5_000 { 100.0 } else { (f64::from(i) / 1000.0).sin() };
            s.push(t, v);
            assert!(s.points.len() <= MAX_POINTS);
        }
        let newest = t0 + f64::from(n - 1) / 1000.0;
        assert!(s.points.len() > MAX_POINTS / 2, "{} points", s.points.len());
        let (first, last) = (s.points[0].0, s.points[s.points.len() - 1].0);
        assert!(first >= newest - SIGNAL_SPAN_S && first < newest - SIGNAL_SPAN_S + 2.0 * BUCKET_S, "{first}");
        assert_eq!(last, newest);
        assert!(s.points.iter().zip(s.points.iter().skip(1)).all(|(a, b)| a.0 <= b.0), "in time order");
        let spikes = s.points.iter().filter(|p| p.1 == 100.0).count();
        assert_eq!(spikes, 30, "every spike of the last 300 s is kept");
        assert_eq!(s.last, Some((newest, (f64::from(n - 1) / 1000.0).sin())));
        assert!(s.folded > 0);
    }

    /// A slow signal keeps every point, and drops those older than the span.
    #[test]
    fn a_slow_signal_keeps_every_point_of_the_span() {
        let mut s = Signal::new("/t".into(), FieldPath::parse("x").unwrap());
        for i in 0..400 {
            s.push(f64::from(i), f64::from(i));
        }
        assert_eq!(s.points.len(), 301);
        assert_eq!(s.points[0], (99.0, 99.0));
        assert_eq!(s.folded, 0);
    }

    #[test]
    fn at_most_max_signals_and_each_field_once() {
        let mut s = Signals::default();
        for i in 0..MAX_SIGNALS {
            s.add("/t", FieldPath(vec![Seg::Key("v".into()), Seg::Index(i)])).unwrap();
        }
        assert_eq!(s.add("/u", FieldPath::parse("x").unwrap()), Err(AddError::Full));
        assert_eq!(s.add("/t", FieldPath::parse("v[0]").unwrap()), Err(AddError::Already));
        assert_eq!(s.topics().len(), 1);
        s.remove(0);
        assert!(s.add("/u", FieldPath::parse("x").unwrap()).is_ok());
        assert_eq!(s.topics().len(), 2);
        s.clear();
        assert!(s.is_empty());
    }

    #[test]
    fn messages_that_do_not_decode_or_lack_the_field_are_counted() {
        use crate::fixture::{imu_payload, imu_type_info};
        let mut s = Signals::default();
        s.add("/imu", FieldPath::parse("accel.y").unwrap()).unwrap();
        s.add("/imu", FieldPath::parse("accel.w").unwrap()).unwrap();
        s.add("/imu", FieldPath::parse("frame_id").unwrap()).unwrap();
        let msg = |payload: Vec<u8>, ti: TypeInfo| Message {
            topic: "/imu".into(),
            payload: payload.into(),
            type_info: Arc::new(ti),
            publisher_id: 1,
            clock: 1,
            send_time_us: 0,
            received_at: std::time::UNIX_EPOCH + std::time::Duration::from_secs(10),
        };
        s.record(&msg(imu_payload(1, "imu", [1.0, 2.0, 3.0], [0.0; 3]), imu_type_info()));
        s.record(&msg(vec![0xff, 0xff, 0xff], imu_type_info()));
        s.record(&msg(vec![1, 2], TypeInfo::raw("bytes")));
        let l = s.list();
        assert_eq!(l[0].points().iter().copied().collect::<Vec<_>>(), vec![(10.0, 2.0)]);
        assert_eq!((l[0].messages, l[0].undecodable, l[0].missing), (3, 2, 0));
        assert_eq!((l[1].messages, l[1].undecodable, l[1].missing), (3, 2, 1));
        assert_eq!((l[2].undecodable, l[2].missing), (2, 1), "a text is not a number");
    }
}
