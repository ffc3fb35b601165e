//! shoal topic name ↔ Zenoh key expression: `<prefix>/<escaped topic>`.
//!
//! Escaping (reversible, [`escape_topic`] / [`unescape_topic`]): ASCII letters, digits and `_ - . ~` stay as they
//! are; a `/` stays a `/` when the characters on both sides of it are not `/` and it is neither the first nor the
//! last character (so every chunk of the key is non-empty, as Zenoh requires); every other byte of the name's UTF-8
//! (`*`, `$`, `#`, `?`, `@`, `%`, spaces, non-ASCII, and a `/` that would make an empty chunk) is written `%XX`
//! (upper-case hex). Unescaping decodes every `%XX` and keeps every other character, so a key a plain Zenoh
//! publisher writes (`shoal/robot/pose`) is the topic `robot/pose`.

/// Whether `b` is kept as it is inside a chunk.
fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'~')
}

fn push_escaped(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(char::from(HEX[usize::from(b >> 4)]));
    out.push(char::from(HEX[usize::from(b & 15)]));
}

/// The key chunk(s) of a shoal topic name (see the module documentation). Empty for an empty name.
pub fn escape_topic(topic: &str) -> String {
    let mut out = String::with_capacity(topic.len());
    let segments: Vec<&str> = topic.split('/').collect();
    for (i, seg) in segments.iter().enumerate() {
        if i > 0 {
            if segments[i - 1].is_empty() || seg.is_empty() {
                push_escaped(&mut out, b'/');
            } else {
                out.push('/');
            }
        }
        for &b in seg.as_bytes() {
            if plain(b) {
                out.push(char::from(b));
            } else {
                push_escaped(&mut out, b);
            }
        }
    }
    out
}

/// The shoal topic name of escaped key chunks; `None` when a `%` is not followed by two hex digits or the result
/// is not UTF-8.
pub fn unescape_topic(key: &str) -> Option<String> {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = key.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The Zenoh key of `topic` under `prefix`.
pub fn topic_key(prefix: &str, topic: &str) -> String {
    format!("{prefix}/{}", escape_topic(topic))
}

/// The shoal topic of a Zenoh key under `prefix`; `None` for a key outside it, under its metadata chunk `@`, or
/// badly escaped.
pub fn topic_of_key(prefix: &str, key: &str) -> Option<String> {
    let rest = key.strip_prefix(prefix)?.strip_prefix('/')?;
    if rest.is_empty() || rest.starts_with('@') {
        return None;
    }
    unescape_topic(rest)
}

/// Checks a key prefix: one or more chunks of letters, digits and `_ - . ~`, separated by single `/`.
pub fn check_prefix(prefix: &str) -> Result<(), String> {
    let ok = !prefix.is_empty() && prefix.split('/').all(|c| !c.is_empty() && c.bytes().all(plain));
    if ok {
        Ok(())
    } else {
        Err(format!("{prefix:?}: chunks of letters, digits and _ - . ~ separated by single / (e.g. shoal or site/a)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_makes_valid_keys() {
        for t in [
            "chatter",
            "robot/pose",
            "/abs",
            "trail/",
            "a//b",
            "/",
            "//",
            "*",
            "a/**/b",
            "$x#y?z",
            "@meta",
            "sp ace",
            "100%",
            "ünï/cödé",
            "a/./b",
        ] {
            let e = escape_topic(t);
            assert_eq!(unescape_topic(&e).as_deref(), Some(t), "{t:?} -> {e:?}");
            let key = topic_key("shoal", t);
            assert!(key.split('/').all(|c| !c.is_empty()), "{t:?} -> {key:?} has an empty chunk");
            assert!(!key.contains(['*', '$', '#', '?', '@', ' ']), "{t:?} -> {key:?}");
            assert_eq!(topic_of_key("shoal", &key).as_deref(), Some(t));
        }
        assert_eq!(escape_topic("robot/pose"), "robot/pose");
        assert_eq!(escape_topic("/abs"), "%2Fabs");
        assert_eq!(escape_topic("a*b"), "a%2Ab");
    }

    #[test]
    fn foreign_keys() {
        assert_eq!(topic_of_key("shoal", "shoal/robot/pose").as_deref(), Some("robot/pose"));
        assert_eq!(topic_of_key("shoal", "other/robot"), None);
        assert_eq!(topic_of_key("shoal", "shoalx/robot"), None);
        assert_eq!(topic_of_key("shoal", "shoal/@type/x"), None);
        assert_eq!(topic_of_key("shoal", "shoal/bad%zz"), None);
        assert_eq!(topic_of_key("site/a", "site/a/t"), Some("t".into()));
    }

    #[test]
    fn prefixes() {
        assert!(check_prefix("shoal").is_ok());
        assert!(check_prefix("site-a/shoal").is_ok());
        for bad in ["", "/shoal", "shoal/", "a//b", "sh*", "@x", "a b"] {
            assert!(check_prefix(bad).is_err(), "{bad:?}");
        }
    }
}
