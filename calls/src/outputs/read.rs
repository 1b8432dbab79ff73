//! Reading a kept output back: a range of lines, or the lines a regular expression
//! matches with context around them (`read_output`, `toolhost output`, MCP
//! `resources/read`).

use std::fmt::Write as _;

use super::budget::Size;

/// Which part of an output a read returns.
#[derive(Debug, Clone)]
pub enum ReadRange {
    /// All of it, exactly as kept.
    All,
    /// Lines `offset..offset+limit` (1-based; `None`: to the end), exactly as kept
    /// (newlines included).
    Lines {
        /// The first line, 1-based.
        offset: usize,
        /// How many lines; `None`: to the end.
        limit: Option<usize>,
    },
    /// The lines that match, with `context` lines around each, as they are, each group
    /// under a header naming its lines (`[lines 11-13]`).
    Grep {
        /// What to look for.
        pattern: regex::Regex,
        /// Lines shown before and after each match.
        context: usize,
    },
}

/// A range a reader asked for that is no range.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RangeError {
    /// Not `A:B`, `A:` or `A`.
    #[error(
        "`{0}` is not a range of lines: give A:B (lines A to B), A: (line A to the end) or A, \
         with lines counted from 1"
    )]
    NotLines(String),
    /// Not a regular expression.
    #[error("`{pattern}` is not a regular expression: {source}")]
    NotRegex {
        /// The pattern given.
        pattern: String,
        /// What is wrong with it.
        source: regex::Error,
    },
    /// An offset of 0.
    #[error("line numbers start at 1 (offset 0 is not a line)")]
    LineZero,
}

/// Lines shown before and after each match of a grep read, unless the reader says.
pub const DEFAULT_CONTEXT: usize = 2;

impl ReadRange {
    /// `A:B` (lines A to B), `A:` (line A to the end) or `A` (line A alone), counted from
    /// 1, as the command line and MCP take them. `Err` says what to write instead.
    pub fn lines(text: &str) -> Result<ReadRange, RangeError> {
        let bad = || RangeError::NotLines(text.to_owned());
        let number = |s: &str| s.trim().parse::<usize>().ok().filter(|n| *n >= 1);
        let (from, to) = match text.split_once(':') {
            Some((a, "")) => (number(a).ok_or_else(bad)?, None),
            Some((a, b)) => (number(a).ok_or_else(bad)?, Some(number(b).ok_or_else(bad)?)),
            None => {
                let a = number(text).ok_or_else(bad)?;
                (a, Some(a))
            }
        };
        if to.is_some_and(|to| to < from) {
            return Err(bad());
        }
        Ok(ReadRange::Lines {
            offset: from,
            limit: to.map(|to| to - from + 1),
        })
    }

    /// The lines matching the regular expression `pattern`, with `context` lines around
    /// each. `Err` names what is wrong with it.
    pub fn grep(pattern: &str, context: usize) -> Result<ReadRange, RangeError> {
        regex::Regex::new(pattern)
            .map(|pattern| ReadRange::Grep { pattern, context })
            .map_err(|source| RangeError::NotRegex {
                pattern: pattern.to_owned(),
                source,
            })
    }
}

/// A part of an output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excerpt {
    /// The text.
    pub text: String,
    /// The output's line number of its first line (1-based; 1 for a grep).
    pub first_line: usize,
    /// The output's size.
    pub size: Size,
    /// For a grep, how many lines matched.
    pub matches: Option<usize>,
}

/// The matching lines of `text` with `context` lines around them, each group under a
/// header naming its lines in the output (`[lines 4-8]`), and how many lines matched.
/// The lines are shown as they are: a line that carries its own number (a file's
/// `12:a3f|` anchor, a search hit's `path:12:`) gets no second one.
fn grep(text: &str, pattern: &regex::Regex, context: usize) -> (String, usize) {
    let lines: Vec<&str> = text.lines().collect();
    let hits: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| pattern.is_match(l))
        .map(|(i, _)| i)
        .collect();
    // Groups of overlapping or touching ranges, as line indexes.
    let mut groups: Vec<(usize, usize)> = Vec::new();
    for &hit in &hits {
        let from = hit.saturating_sub(context);
        let to = (hit + context).min(lines.len().saturating_sub(1));
        match groups.last_mut() {
            Some(last) if from <= last.1 + 1 => last.1 = last.1.max(to),
            _ => groups.push((from, to)),
        }
    }
    let mut out = String::new();
    for (from, to) in groups {
        if from == to {
            let _ = writeln!(out, "[line {}]", from + 1);
        } else {
            let _ = writeln!(out, "[lines {}-{}]", from + 1, to + 1);
        }
        for line in &lines[from..=to] {
            out.push_str(line);
            out.push('\n');
        }
    }
    (out, hits.len())
}

impl ReadRange {
    /// This part of `text`, an output of `size` (the store's reading, and the fuzz
    /// targets').
    #[doc(hidden)]
    pub fn apply(&self, text: String, size: Size) -> Result<Excerpt, RangeError> {
        Ok(match self {
            ReadRange::All => Excerpt {
                text,
                first_line: 1,
                size,
                matches: None,
            },
            ReadRange::Lines { offset, limit } => {
                if *offset == 0 {
                    return Err(RangeError::LineZero);
                }
                let lines = text.split_inclusive('\n').skip(offset - 1);
                let part: String = match limit {
                    Some(n) => lines.take(*n).collect(),
                    None => lines.collect(),
                };
                Excerpt {
                    text: part,
                    first_line: *offset,
                    size,
                    matches: None,
                }
            }
            ReadRange::Grep { pattern, context } => {
                let (text, matches) = grep(&text, pattern, *context);
                Excerpt {
                    text,
                    first_line: 1,
                    size,
                    matches: Some(matches),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(n: usize) -> String {
        (1..=n).map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn grep_groups_matches_and_context_under_headers_without_numbering_lines() {
        let text = numbered(20);
        let re = regex::Regex::new(r"^line (5|7|15)$").expect("regex");
        let (out, n) = grep(&text, &re, 1);
        assert_eq!(n, 3);
        assert_eq!(
            out,
            "[lines 4-8]\nline 4\nline 5\nline 6\nline 7\nline 8\n[lines 14-16]\nline 14\nline 15\nline 16\n"
        );
        let (alone, _) = grep(&text, &regex::Regex::new("^line 20$").expect("regex"), 0);
        assert_eq!(alone, "[line 20]\nline 20\n");
    }
}
