//! The one escaping rule for names that come from the network (topic, process, host, unit and type names, state
//! texts) or from a file, before a terminal or a table shows them: [`printable`].

use std::borrow::Cow;
use std::fmt::Write;

/// `s` as it can be shown on a terminal or in a table row: every character that would not show as itself is
/// written as an escape, so that a name from a peer cannot move the cursor, clear the screen, set the window title,
/// reorder the rest of the line, hide characters or split a row:
/// - `\` becomes `\\`, so that an escape in the output always stands for an escaped character;
/// - the C0 controls (tab, newline and ESC among them), DEL and the C1 controls (U+0080–U+009F, CSI among them)
///   become `\xHH`;
/// - the bidirectional controls (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), the invisible format
///   characters (soft hyphen, zero-width space and joiners, word joiner, invisible operators, byte order mark,
///   variation selectors, tag characters, fillers and the other Unicode format characters), the line and
///   paragraph separators and the noncharacters become `\u{HHHH}`;
/// - a combining mark at the very start (which would join the character before the name on the screen) becomes
///   `\u{HHHH}`.
///
/// Everything else is kept, so ordinary names (any script, emoji without variation selectors) are returned as they
/// are, borrowed. JSON output needs none of this: its encoder escapes control characters itself.
pub fn printable(s: &str) -> Cow<'_, str> {
    let needs = |(i, c): (usize, char)| c == '\\' || escaped(c) || (i == 0 && leading_mark(c));
    if !s.chars().enumerate().any(needs) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for (i, c) in s.chars().enumerate() {
        if c == '\\' {
            out.push_str("\\\\");
        } else if u32::from(c) < 0xA0 && escaped(c) {
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        } else if escaped(c) || (i == 0 && leading_mark(c)) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Characters that are always escaped: controls, bidirectional controls, invisible format characters, line and
/// paragraph separators, noncharacters.
fn escaped(c: char) -> bool {
    let u = u32::from(c);
    matches!(
        u,
        0x00..=0x1F
            | 0x7F..=0x9F
            | 0xAD
            | 0x34F
            | 0x61C
            | 0x600..=0x605
            | 0x6DD
            | 0x70F
            | 0x890..=0x891
            | 0x8E2
            | 0x115F..=0x1160
            | 0x17B4..=0x17B5
            | 0x180B..=0x180F
            | 0x200B..=0x200F
            | 0x2028..=0x202E
            | 0x2060..=0x206F
            | 0x3164
            | 0xFDD0..=0xFDEF
            | 0xFE00..=0xFE0F
            | 0xFEFF
            | 0xFFA0
            | 0xFFF9..=0xFFFB
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0000..=0xE0FFF
    ) || (u & 0xFFFE) == 0xFFFE
}

/// Combining marks of the main combining blocks: escaped at the start of a name only.
fn leading_mark(c: char) -> bool {
    matches!(u32::from(c), 0x300..=0x36F | 0x483..=0x489 | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F)
}

#[cfg(test)]
mod tests {
    use super::printable;
    use std::borrow::Cow;

    #[test]
    fn terminal_sequences_become_visible_escapes() {
        // CSI clear screen, OSC window title ended by BEL, cursor movement, a C1 CSI, DEL.
        assert_eq!(printable("evil\x1b[2J\x1b]0;pwned\x07"), r"evil\x1b[2J\x1b]0;pwned\x07");
        assert_eq!(printable("a\u{9b}31mred\u{7f}"), r"a\x9b31mred\x7f");
        assert_eq!(printable("two\nlines\ttab\r"), r"two\x0alines\x09tab\x0d");
        assert_eq!(printable("nul\0"), r"nul\x00");
    }

    #[test]
    fn bidi_overrides_and_invisible_characters_are_escaped() {
        assert_eq!(printable("invoice\u{202e}fdp.exe"), r"invoice\u{202e}fdp.exe");
        assert_eq!(printable("\u{2066}a\u{2069}\u{200f}"), r"\u{2066}a\u{2069}\u{200f}");
        assert_eq!(printable("top\u{200b}ic"), r"top\u{200b}ic", "a zero-width space would make two names look alike");
        assert_eq!(printable("bom\u{feff}"), r"bom\u{feff}");
        assert_eq!(printable("tag\u{e0041}"), r"tag\u{e0041}");
        assert_eq!(printable("line\u{2028}sep"), r"line\u{2028}sep");
        assert_eq!(printable("non\u{fffe}\u{1ffff}"), r"non\u{fffe}\u{1ffff}");
    }

    #[test]
    fn a_leading_combining_mark_is_escaped_an_inner_one_is_kept() {
        assert_eq!(printable("\u{301}x"), r"\u{301}x");
        assert_eq!(printable("e\u{301}"), "e\u{301}");
    }

    #[test]
    fn backslashes_are_doubled_so_that_escapes_are_unambiguous() {
        assert_eq!(printable(r"a\x1b"), r"a\\x1b");
        assert_ne!(printable(r"a\x1b"), printable("a\x1b"));
    }

    #[test]
    fn ordinary_names_are_borrowed_unchanged() {
        for s in ["/robot/imu", "カメラ/画像", "température", "emoji 🚀", "", "a b"] {
            assert!(matches!(printable(s), Cow::Borrowed(b) if b == s), "{s}");
        }
    }
}
