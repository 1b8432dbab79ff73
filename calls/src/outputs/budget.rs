//! The output budget: how much text a result may carry, how big a text is, and the cut
//! that keeps a text's head and tail with one marker line between them saying how much
//! was left out and where to read it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The smallest `max_chars` that is not 0: room for the marker line and some text.
pub const MIN_MAX_CHARS: usize = 1000;

/// How many lines a read of a range returns when it names no limit (and the marker
/// suggests reading at a time).
pub const DEFAULT_READ_LINES: usize = 400;

/// How much text a result may carry: characters and lines, 0 meaning that limit is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The most characters (Unicode scalar values); 0: no limit.
    pub max_chars: usize,
    /// The most lines; 0: no limit.
    pub max_lines: usize,
}

impl Budget {
    /// 30,000 characters (about 8,000 tokens, what Claude Code allows one command's output)
    /// and 1,000 lines.
    pub const DEFAULT: Budget = Budget {
        max_chars: 30_000,
        max_lines: 1_000,
    };

    /// No limit at all.
    pub const OFF: Budget = Budget {
        max_chars: 0,
        max_lines: 0,
    };

    /// Whether both limits are off.
    pub fn is_off(&self) -> bool {
        self.max_chars == 0 && self.max_lines == 0
    }

    /// Whether `text` fits. Counting stops at the limits, so a short text costs next to
    /// nothing.
    pub fn fits(&self, text: &str) -> bool {
        fits(text, self.max_chars, self.max_lines)
    }
}

impl Default for Budget {
    fn default() -> Self {
        Budget::DEFAULT
    }
}

/// A profile's `[output]` settings, resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutputSettings {
    /// The budget every result is held to.
    pub budget: Budget,
    /// Kept outputs older than this are removed; `None`: kept regardless of age.
    pub keep_for: Option<Duration>,
    /// The most bytes of kept outputs; past it the oldest go. 0: no limit.
    pub keep_bytes: u64,
    /// The most characters a caller may ask for in one result (an MCP client does with
    /// `_meta["anthropic/maxResultSizeChars"]`); 0: callers cannot change the budget.
    pub max_chars_ceiling: usize,
    /// Whether the profile's tools include `read_output`.
    pub read_output: bool,
}

impl Default for OutputSettings {
    fn default() -> Self {
        OutputSettings {
            budget: Budget::DEFAULT,
            keep_for: Some(Duration::from_secs(7 * 24 * 3600)),
            keep_bytes: 256 << 20,
            max_chars_ceiling: 500_000,
            read_output: true,
        }
    }
}

impl OutputSettings {
    /// The budget of one request: the profile's, or, when the caller asked for its own
    /// character limit, that limit (within [`MIN_MAX_CHARS`] and the ceiling) with no line
    /// limit (the caller said how much text it takes).
    pub fn budget_for(&self, asked: Option<usize>) -> Budget {
        match asked {
            Some(chars) if self.max_chars_ceiling > 0 => Budget {
                max_chars: chars.clamp(MIN_MAX_CHARS, self.max_chars_ceiling.max(MIN_MAX_CHARS)),
                max_lines: 0,
            },
            _ => self.budget,
        }
    }
}

/// How big a text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Size {
    /// Characters (Unicode scalar values).
    pub chars: usize,
    /// Lines: newlines, plus one for a last line without one.
    pub lines: usize,
    /// Bytes of UTF-8.
    pub bytes: usize,
}

impl Size {
    /// Measures `text` (all of it).
    pub fn of(text: &str) -> Size {
        Size {
            chars: text.chars().count(),
            lines: line_count(text),
            bytes: text.len(),
        }
    }
}

fn newlines(text: &str) -> usize {
    text.bytes().filter(|&b| b == b'\n').count()
}

fn line_count(text: &str) -> usize {
    newlines(text) + usize::from(!text.is_empty() && !text.ends_with('\n'))
}

/// Whether `text` is within `max_chars` characters and `max_lines` lines (0: no limit),
/// counting no further than the limits.
fn fits(text: &str, max_chars: usize, max_lines: usize) -> bool {
    if max_chars > 0 && text.len() > max_chars && text.chars().nth(max_chars).is_some() {
        return false;
    }
    if max_lines > 0 {
        // More than `max_lines` lines means at least `max_lines` newlines with text after
        // the last of them.
        let mut seen = 0;
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                seen += 1;
                if seen == max_lines {
                    return i + 1 == text.len();
                }
            }
        }
    }
    true
}

/// Where the text a marker leaves out can be read, which the marker says.
#[derive(Debug, Clone, Copy)]
pub enum Rest<'a> {
    /// Kept under this id.
    Kept(&'a str),
    /// Not kept (no store, or it could not be written): the marker says so.
    NotKept,
}

/// A text cut to a budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// Head, marker line, tail.
    pub text: String,
    /// The full text's size.
    pub full: Size,
    /// Characters left out.
    pub left_out_chars: usize,
    /// Lines wholly or partly left out.
    pub left_out_lines: usize,
    /// The (1-based) number of the first line left out, wholly or partly.
    pub first_left_out: usize,
}

/// `text` as its head and tail with one marker line between them, within `max_chars`
/// characters and `max_lines` lines (0: that limit off); `None` if it fits as it is.
/// Never splits a character. The marker says how many characters and lines were left
/// out and where to read them (`rest`). A `max_chars` under [`MIN_MAX_CHARS`] may be
/// exceeded by the marker itself.
pub fn cut(text: &str, max_chars: usize, max_lines: usize, rest: Rest<'_>) -> Option<Cut> {
    if fits(text, max_chars, max_lines) {
        return None;
    }
    let full = Size::of(text);
    // The longest the marker can be: every number at its largest.
    let reserve = marker(rest, full.chars, full.lines, full.lines, full.lines).len() + 2;
    let char_room = if max_chars == 0 {
        usize::MAX
    } else {
        max_chars.saturating_sub(reserve)
    };
    let line_room = if max_lines == 0 {
        usize::MAX
    } else {
        max_lines - 1
    };

    // The head: at most half the lines and half the characters.
    let (head_chars_room, head_lines_room) = (char_room / 2, line_room / 2);
    let (mut head_end, mut head_chars, mut head_nl) = (0, 0, 0usize);
    for (i, c) in text.char_indices() {
        if head_chars == head_chars_room || head_nl == head_lines_room {
            break;
        }
        head_end = i + c.len_utf8();
        head_chars += 1;
        if c == '\n' {
            head_nl += 1;
        }
    }
    // Whole lines where at least one fits: the partial last line goes to the middle.
    if let Some(nl) = text[..head_end].rfind('\n')
        && nl + 1 < head_end
    {
        head_chars -= text[nl + 1..head_end].chars().count();
        head_end = nl + 1;
    }
    let head = &text[..head_end];
    let head_partial = !head.is_empty() && !head.ends_with('\n');
    let head_lines = head_nl + usize::from(head_partial);

    // The tail: what room is left, from the end, starting at a line's start unless the
    // characters run out first.
    let tail_chars_room = char_room.saturating_sub(head_chars);
    let tail_lines_room = line_room.saturating_sub(head_lines);
    let ends_nl = text.ends_with('\n');
    let rest_text = &text[head_end..];
    let (mut tail_start, mut tail_chars, mut tail_nl) = (rest_text.len(), 0, 0);
    for (i, c) in rest_text.char_indices().rev() {
        let nl = tail_nl + usize::from(c == '\n');
        let lines = nl + usize::from(!ends_nl);
        if tail_chars + 1 > tail_chars_room || lines > tail_lines_room {
            break;
        }
        tail_start = i;
        tail_chars += 1;
        tail_nl = nl;
    }
    // Likewise the tail starts at a line's start where a whole line fits.
    let starts_line = tail_start == 0 || rest_text[..tail_start].ends_with('\n');
    if !starts_line
        && let Some(nl) = rest_text[tail_start..].find('\n')
        && tail_start + nl + 1 < rest_text.len()
    {
        tail_chars -= rest_text[tail_start..=tail_start + nl].chars().count();
        tail_start += nl + 1;
    }
    let tail = &rest_text[tail_start..];
    let middle = &rest_text[..tail_start];

    let first_left_out = head_nl + 1;
    let middle_nl = newlines(middle);
    // The line holding the middle's last byte (a newline belongs to the line it ends).
    let last_left_out = head_nl + middle_nl + usize::from(!middle.ends_with('\n'));
    let left_out_lines = last_left_out.saturating_sub(first_left_out) + 1;
    let left_out_chars = full.chars - head_chars - tail_chars;

    let line = marker(
        rest,
        left_out_chars,
        left_out_lines,
        first_left_out,
        left_out_lines.min(DEFAULT_READ_LINES),
    );
    let mut out = String::with_capacity(head.len() + line.len() + tail.len() + 2);
    out.push_str(head);
    if head_partial {
        out.push('\n');
    }
    out.push_str(&line);
    out.push('\n');
    out.push_str(tail);
    Some(Cut {
        text: out,
        full,
        left_out_chars,
        left_out_lines,
        first_left_out,
    })
}

/// The marker line (ASCII only, so its length in bytes is its length in characters).
fn marker(rest: Rest<'_>, chars: usize, lines: usize, offset: usize, limit: usize) -> String {
    let (chars, lines) = (crate::text::grouped(chars), crate::text::grouped(lines));
    match rest {
        Rest::Kept(id) => format!(
            "[toolhost: {chars} characters in {lines} lines left out of this output (id {id}); \
             read them with read_output {{\"id\":\"{id}\",\"offset\":{offset},\"limit\":{limit}}} \
             or {{\"id\":\"{id}\",\"grep\":\"REGEX\"}}; from a shell: toolhost output {id}]"
        ),
        Rest::NotKept => format!(
            "[toolhost: {chars} characters in {lines} lines left out of this output; the full \
             output was not kept]"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(n: usize) -> String {
        (1..=n).map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn a_text_within_the_budget_is_not_cut() {
        assert!(cut("short", 1000, 10, Rest::NotKept).is_none());
        let exact = "x".repeat(1000);
        assert!(cut(&exact, 1000, 0, Rest::NotKept).is_none());
        // Exactly N lines, with or without the last newline.
        assert!(cut(&numbered(10), 0, 10, Rest::NotKept).is_none());
        assert!(cut(numbered(10).trim_end(), 0, 10, Rest::NotKept).is_none());
        // 0 = off: nothing is ever cut.
        assert!(cut(&numbered(100_000), 0, 0, Rest::NotKept).is_none());
    }

    #[test]
    fn one_over_is_cut_within_the_budget_with_one_marker() {
        let over = "y".repeat(1001);
        let c = cut(&over, 1000, 0, Rest::Kept("o0123")).expect("cut");
        assert!(c.text.chars().count() <= 1000, "{}", c.text.chars().count());
        assert_eq!(c.text.matches("[toolhost:").count(), 1);
        assert_eq!(c.full.chars, 1001);
        let lines = numbered(11);
        let c = cut(&lines, 0, 10, Rest::NotKept).expect("cut");
        assert!(line_count(&c.text) <= 10, "{}", c.text);
        assert!(c.text.starts_with("line 1\n"));
        assert!(c.text.ends_with("line 11\n"));
        assert!(c.text.contains("not kept"));
        assert_eq!(c.left_out_lines, 11 - (line_count(&c.text) - 1));
    }

    #[test]
    fn characters_are_never_split() {
        // Four-byte characters, and a limit that falls inside one in bytes.
        let text: String = "😀é".repeat(5000);
        for max in [1000, 1001, 1003, 4097] {
            let c = cut(&text, max, 0, Rest::Kept("o1")).expect("cut");
            assert!(c.text.chars().count() <= max);
            let kept: usize = c
                .text
                .lines()
                .filter(|l| !l.starts_with("[toolhost:"))
                .map(|l| l.chars().count())
                .sum();
            assert_eq!(c.left_out_chars + kept, 10_000);
        }
    }

    #[test]
    fn head_and_tail_are_the_texts_own_and_the_marker_names_the_first_line_left_out() {
        let text = numbered(5000);
        let c = cut(&text, 0, 1000, Rest::Kept("oabc")).expect("cut");
        let kept: Vec<&str> = c.text.lines().collect();
        assert_eq!(kept.len(), 1000);
        assert_eq!(kept[0], "line 1");
        assert_eq!(kept[498], "line 499");
        assert!(kept[499].starts_with("[toolhost: "), "{}", kept[499]);
        assert!(kept[499].contains("\"offset\":500"), "{}", kept[499]);
        assert_eq!(kept[999], "line 5000");
        assert_eq!(c.first_left_out, 500);
        assert_eq!(c.left_out_lines, 5000 - 999);
    }

    #[test]
    fn a_character_limit_inside_a_line_keeps_whole_lines() {
        // 64-character lines: half the room ends inside one.
        let text: String = (1..=2000).map(|i| format!("{i:063}\n")).collect();
        let c = cut(&text, 5000, 0, Rest::NotKept).expect("cut");
        let (head, rest) = c.text.split_once("[toolhost:").expect("marker");
        let tail = rest.split_once('\n').map(|(_, t)| t).expect("tail");
        assert!(
            head.ends_with('\n') && text.starts_with(head),
            "whole lines in the head"
        );
        assert!(text.ends_with(tail) && text[..text.len() - tail.len()].ends_with('\n'));
        assert_eq!(c.first_left_out, head.lines().count() + 1);
        assert_eq!(
            c.left_out_lines,
            2000 - head.lines().count() - tail.lines().count()
        );
    }

    #[test]
    fn one_long_line_is_cut_inside_it() {
        let text = "z".repeat(100_000);
        let c = cut(&text, 30_000, 1000, Rest::NotKept).expect("cut");
        assert!(c.text.chars().count() <= 30_000);
        assert_eq!(c.left_out_lines, 1);
        assert_eq!(line_count(&c.text), 3);
    }

    #[test]
    fn a_clients_limit_is_held_between_the_minimum_and_the_ceiling() {
        let s = OutputSettings::default();
        assert_eq!(s.budget_for(None), Budget::DEFAULT);
        assert_eq!(s.budget_for(Some(10)).max_chars, MIN_MAX_CHARS);
        assert_eq!(s.budget_for(Some(10_000_000)).max_chars, 500_000);
        assert_eq!(
            s.budget_for(Some(100_000)),
            Budget {
                max_chars: 100_000,
                max_lines: 0
            }
        );
        let fixed = OutputSettings {
            max_chars_ceiling: 0,
            ..OutputSettings::default()
        };
        assert_eq!(fixed.budget_for(Some(100_000)), Budget::DEFAULT);
    }
}
