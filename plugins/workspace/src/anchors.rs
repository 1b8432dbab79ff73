//! Hashline anchors: `read_file` shows each line as `NUMBER:HASH|text`, where HASH is
//! three hex digits of a hash of the line's content; `edit_file` names the lines it
//! replaces by these anchors and refuses an edit whose anchors no longer match the file,
//! so an edit made from an old read never lands on changed text.

use std::fmt;

/// Hex digits of a line's hash in an anchor.
pub(crate) const HASH_DIGITS: usize = 3;

/// The hash of one line's content (without its line ending; a trailing `\r` is ignored,
/// so CRLF files anchor like LF files): FNV-1a, the low 12 bits as three hex digits.
pub fn line_hash(line: &str) -> String {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let mut hash: u32 = 0x811c_9dc5;
    for byte in line.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    // Fold the high bits in, so the three digits depend on every byte.
    let folded = hash ^ (hash >> 12) ^ (hash >> 24);
    format!("{:03x}", folded & 0xfff)
}

/// One line as `read_file` shows it: `12:a3f|text`.
pub fn format_line(number: usize, line: &str) -> String {
    let line = line.strip_suffix('\r').unwrap_or(line);
    format!("{number}:{}|{line}", line_hash(line))
}

/// One line as `read_file` shows it, its text cut after `max_chars` characters: the
/// anchor's hash is still that of the whole line (so an edit by anchor sees the real
/// line), and the cut says how much was left out: `12:a3f|text… [+1234 characters]`.
pub(crate) fn format_line_cut(number: usize, line: &str, max_chars: usize) -> String {
    let line = line.strip_suffix('\r').unwrap_or(line);
    match line.char_indices().nth(max_chars) {
        None => format_line(number, line),
        Some((cut, _)) => {
            let rest = line[cut..].chars().count();
            format!(
                "{number}:{}|{}… [+{rest} characters]",
                line_hash(line),
                &line[..cut]
            )
        }
    }
}

/// An anchor a model wrote: a line number and the hash it saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Anchor {
    /// The line number, from 1.
    pub(crate) line: usize,
    /// The hash, lower-case hex.
    pub(crate) hash: String,
}

impl Anchor {
    /// Reads `12:a3f` (also `12:a3f|text`, as copied from `read_file`'s output).
    pub(crate) fn parse(text: &str) -> Result<Anchor, String> {
        let text = text.trim();
        let anchor = text.split('|').next().unwrap_or(text);
        let bad = || {
            format!(
                "'{text}' is not an anchor: write the line number and hash read_file showed, \
                 like \"12:a3f\""
            )
        };
        let (line, hash) = anchor.split_once(':').ok_or_else(bad)?;
        let line: usize = line.trim().parse().map_err(|_| bad())?;
        let hash = hash.trim().to_ascii_lowercase();
        if line == 0 || hash.len() != HASH_DIGITS || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        Ok(Anchor { line, hash })
    }

    /// Whether `lines` (the file's lines, numbered from 1) still has this anchor's line
    /// with the same content.
    pub(crate) fn matches(&self, lines: &[&str]) -> bool {
        self.line
            .checked_sub(1)
            .and_then(|i| lines.get(i))
            .is_some_and(|line| line_hash(line) == self.hash)
    }
}

impl fmt::Display for Anchor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_shows_its_number_and_hash_and_the_anchor_reads_back() {
        let shown = format_line(12, "fn main() {\r");
        let anchor = Anchor::parse(&shown).expect("anchor");
        assert_eq!(anchor.line, 12);
        assert_eq!(anchor.hash, line_hash("fn main() {"));
        assert!(shown.ends_with("|fn main() {"), "{shown}");
        assert!(
            anchor.matches(
                &vec!["x"; 11]
                    .into_iter()
                    .chain(["fn main() {"])
                    .collect::<Vec<_>>()
            )
        );
    }

    #[test]
    fn a_cut_line_keeps_the_whole_lines_hash_and_says_what_was_cut() {
        let long = "é".repeat(10);
        let cut = format_line_cut(3, &long, 4);
        assert_eq!(cut, format!("3:{}|éééé… [+6 characters]", line_hash(&long)));
        assert_eq!(format_line_cut(3, "short\r", 10), format_line(3, "short"));
        assert!(
            Anchor::parse(&cut)
                .expect("anchor")
                .matches(&["", "", &long])
        );
    }

    #[test]
    fn changed_lines_and_bad_anchors_do_not_match() {
        let anchor = Anchor::parse("1:000").expect("anchor");
        let lines = ["a"];
        assert_eq!(anchor.matches(&lines), line_hash("a") == "000");
        assert_ne!(line_hash("let x = 1;"), line_hash("let x = 2;"));
        for bad in ["", "12", "x:abc", "0:abc", "3:abcd", "3:xyz"] {
            assert!(Anchor::parse(bad).is_err(), "{bad}");
        }
        assert!(!Anchor::parse("5:abc").expect("anchor").matches(&lines));
    }
}
