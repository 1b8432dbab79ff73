//! Text for messages and for what is sent on: numbers with their thousands grouped,
//! shortening (cut at a character boundary, saying how much was left out), and escaping the control characters of text that came
//! from a plugin before it reaches a terminal.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::sync::OnceLock;

/// `n` with its thousands grouped by commas, as messages show counts (the call core
/// holds the one formatter).
pub(crate) use toolhost_calls::text::grouped;

/// `text` cut to at most `max_chars` characters, with a note of how many more there were.
pub(crate) fn shorten(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text.to_owned(),
        Some((cut, _)) => format!(
            "{} … ({} more characters)",
            &text[..cut],
            text[cut..].chars().count()
        ),
    }
}

/// Whether `c` is escaped by [`escape_controls`]: C0 controls but newline and tab (ESC
/// included), DEL, C1 controls (U+0080 to U+009F, which some terminals read as ESC
/// sequences), and the bidirectional controls (U+202A to U+202E, U+2066 to U+2069,
/// U+200E, U+200F, U+061C), which make a terminal show text in another order than it is
/// (a file name or command that reads as another: the "Trojan Source" trick).
fn is_escaped(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || ('\u{80}'..='\u{9f}').contains(&c)
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{61c}')
}

/// `text` with its control characters written out as escapes (`\x1b`, `\x7f`, `\u{9b}`),
/// so a terminal shows them instead of obeying them (colours, clearing the screen,
/// retitling the window, moving the cursor over earlier lines). Newlines and tabs stay.
/// Borrowed when there is nothing to escape.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !is_escaped(c) {
            out.push(c);
        } else if (c as u32) < 0x80 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
    Cow::Owned(out)
}

/// `text` as [`escape_controls`] makes it when `terminal` is true, else as it is.
pub fn for_terminal(text: &str, terminal: bool) -> Cow<'_, str> {
    if terminal {
        escape_controls(text)
    } else {
        Cow::Borrowed(text)
    }
}

/// Plugin-provided text for the host's log: escaped when the log goes to a terminal
/// (standard error is one), as it is otherwise.
pub(crate) fn for_log(text: &str) -> Cow<'_, str> {
    static STDERR_IS_TERMINAL: OnceLock<bool> = OnceLock::new();
    for_terminal(
        text,
        *STDERR_IS_TERMINAL.get_or_init(|| std::io::stderr().is_terminal()),
    )
}

/// Whether `needle` occurs in `haystack` (bytes that need not be text: a JSON line, an
/// ELF string table).
pub(crate) fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_at_character_boundaries_and_says_how_much() {
        assert_eq!(shorten("héllo", 10), "héllo");
        assert_eq!(shorten("héllo", 2), "hé … (3 more characters)");
    }

    #[test]
    fn control_characters_are_escaped_but_newlines_tabs_and_text_stay() {
        assert!(matches!(
            escape_controls("plain\ttext\nhé ✓"),
            Cow::Borrowed("plain\ttext\nhé ✓")
        ));
        assert_eq!(
            escape_controls("\x1b[31mred\x1b[0m"),
            "\\x1b[31mred\\x1b[0m"
        );
        assert_eq!(
            escape_controls("a\rb\x07c\x00d\x08"),
            "a\\x0db\\x07c\\x00d\\x08"
        );
        assert_eq!(escape_controls("del\x7f"), "del\\x7f");
        assert_eq!(
            escape_controls("csi\u{9b}2J\u{80}\u{9f}"),
            "csi\\u{9b}2J\\u{80}\\u{9f}"
        );
        // The first character past C1 is text.
        assert_eq!(escape_controls("\u{a0}"), "\u{a0}");
        // An OSC title change and a hyperlink, as a whole.
        assert_eq!(escape_controls("\x1b]0;owned\x07"), "\\x1b]0;owned\\x07");
        // Bidirectional overrides and isolates: a name that would read reversed.
        assert_eq!(
            escape_controls("ok\u{202e}txt.exe\u{2066}x\u{2069}\u{200f}"),
            "ok\\u{202e}txt.exe\\u{2066}x\\u{2069}\\u{200f}"
        );
        // Right-to-left text itself is text.
        assert_eq!(escape_controls("שלום"), "שלום");
    }

    #[test]
    fn only_terminals_get_escapes() {
        assert_eq!(for_terminal("\x1b[2J", false), "\x1b[2J");
        assert_eq!(for_terminal("\x1b[2J", true), "\\x1b[2J");
    }
}

/// A duration as a person says it: "15 minutes", "90 seconds", "1.5 seconds".
pub(crate) fn duration(d: std::time::Duration) -> String {
    let secs = d.as_secs_f64();
    let plural = |n: u64, unit: &str| format!("{n} {unit}{}", if n == 1 { "" } else { "s" });
    if d.subsec_nanos() != 0 {
        format!("{secs} seconds")
    } else if d.as_secs().is_multiple_of(3600) && d.as_secs() > 0 {
        plural(d.as_secs() / 3600, "hour")
    } else if d.as_secs().is_multiple_of(60) && d.as_secs() > 0 {
        plural(d.as_secs() / 60, "minute")
    } else {
        plural(d.as_secs(), "second")
    }
}

#[cfg(test)]
mod duration_tests {
    use std::time::Duration;

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(super::duration(Duration::from_secs(900)), "15 minutes");
        assert_eq!(super::duration(Duration::from_secs(60)), "1 minute");
        assert_eq!(super::duration(Duration::from_secs(7200)), "2 hours");
        assert_eq!(super::duration(Duration::from_secs(90)), "90 seconds");
        assert_eq!(super::duration(Duration::from_secs(1)), "1 second");
        assert_eq!(super::duration(Duration::from_millis(1500)), "1.5 seconds");
    }
}
