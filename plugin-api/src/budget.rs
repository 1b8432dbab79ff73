//! The output budget of a call (plugin-api 0.1.4): how much text its result may hold
//! before the host cuts it, and a [`Page`] that fills a result up to it, so a tool that
//! shows part of something (a file, matches, a listing) can stop at the budget and say
//! where to read on instead of being cut in the middle.

use serde::{Deserialize, Serialize};

/// The most text a call's result may hold: characters (Unicode scalar values) and lines,
/// 0 meaning that limit is off. A result over it is cut by the host (its head and tail
/// with a marker between, the whole kept for `read_output`); a tool that pages stays
/// within it and is never cut.
///
/// It is the answer to [`HostRequest::OutputBudget`](crate::HostRequest::OutputBudget)
/// (`{"max_chars": 30000, "max_lines": 1000}`); tools read it with
/// [`ToolContext::output_budget`](crate::ToolContext::output_budget).
///
/// ```
/// use toolhost_plugin_api::OutputBudget;
///
/// let budget: OutputBudget = serde_json::from_str(r#"{"max_chars": 30000, "max_lines": 1000}"#).unwrap();
/// assert!(budget.fits("a short answer\n"));
/// assert!(!OutputBudget { max_chars: 5, max_lines: 0 }.fits("six ch"));
/// assert!(OutputBudget::UNLIMITED.fits(&"x".repeat(1 << 20)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OutputBudget {
    /// The most characters; 0: no limit.
    #[serde(default)]
    pub max_chars: u64,
    /// The most lines; 0: no limit.
    #[serde(default)]
    pub max_lines: u64,
}

impl OutputBudget {
    /// No limit: what [`ToolContext::output_budget`](crate::ToolContext::output_budget)
    /// answers on a host that does not say its budget (one older than 0.1.4, which cuts
    /// results to its own).
    pub const UNLIMITED: OutputBudget = OutputBudget {
        max_chars: 0,
        max_lines: 0,
    };

    /// Whether `text` is within the budget. A last line without a newline counts as a
    /// line.
    pub fn fits(&self, text: &str) -> bool {
        let lines = text.bytes().filter(|&b| b == b'\n').count()
            + usize::from(!text.is_empty() && !text.ends_with('\n'));
        within(text.chars().count() as u64, self.max_chars) && within(lines as u64, self.max_lines)
    }

    /// A page that fills up to this budget less `reserve_chars` characters and
    /// `reserve_lines` lines, the room a tool keeps for what it writes around the page (a
    /// header, a "read on with offset N" line). A budget smaller than the reserve still
    /// leaves room for one line of one character, so a page always shows something (the
    /// host's cut is the backstop for what passes the budget then).
    ///
    /// ```
    /// use toolhost_plugin_api::OutputBudget;
    ///
    /// let budget = OutputBudget { max_chars: 0, max_lines: 5 };
    /// let mut page = budget.page(0, 2); // a header and a footer line
    /// let shown = (1..=10).take_while(|n| page.push_line(&format!("line {n}"))).count();
    /// assert_eq!(shown, 3);
    /// assert!(page.is_full());
    /// let text = format!("<lines 1-{shown}>\n{}(read on from line {})\n", page.text(), shown + 1);
    /// assert!(budget.fits(&text));
    /// ```
    pub fn page(&self, reserve_chars: u64, reserve_lines: u64) -> Page {
        let room = |max: u64, reserve: u64, least: u64| {
            (max != 0).then(|| max.saturating_sub(reserve).max(least))
        };
        Page {
            // One character and its newline; one line.
            max_chars: room(self.max_chars, reserve_chars, 2),
            max_lines: room(self.max_lines, reserve_lines, 1),
            chars: 0,
            lines: 0,
            text: String::new(),
            full: false,
        }
    }
}

fn within(n: u64, max: u64) -> bool {
    max == 0 || n <= max
}

/// Text filled line by line up to a budget (see [`OutputBudget::page`]). Once a line did
/// not fit the page is full and takes no more, so what it holds is always a run of whole
/// lines from the first.
///
/// ```
/// use toolhost_plugin_api::OutputBudget;
///
/// let mut page = OutputBudget { max_chars: 12, max_lines: 0 }.page(0, 0);
/// assert!(page.push_line("first")); // 6 characters with its newline
/// assert_eq!(page.room_chars(), Some(5));
/// assert!(!page.push_line("second")); // 7 more would make 13
/// assert!(page.is_full() && !page.push_line("x")); // full: takes nothing more
/// assert_eq!((page.lines(), page.into_text()), (1, "first\n".to_owned()));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    max_chars: Option<u64>,
    max_lines: Option<u64>,
    chars: u64,
    lines: u64,
    text: String,
    full: bool,
}

impl Page {
    /// Appends `line` and a newline if both fit; `false` (nothing appended, and the page
    /// is full from now on) if not.
    pub fn push_line(&mut self, line: &str) -> bool {
        if self.full {
            return false;
        }
        let chars = line.chars().count() as u64 + 1;
        let fits = self.max_chars.is_none_or(|max| self.chars + chars <= max)
            && self.max_lines.is_none_or(|max| self.lines < max);
        if !fits {
            self.full = true;
            return false;
        }
        self.text.push_str(line);
        self.text.push('\n');
        self.chars += chars;
        self.lines += 1;
        true
    }

    /// The characters a next line may have and still fit (its newline counted);
    /// `None`: no character limit. `Some(0)` when not even an empty line fits.
    pub fn room_chars(&self) -> Option<u64> {
        self.max_chars
            .map(|max| max.saturating_sub(self.chars).saturating_sub(1))
    }

    /// Whether a line did not fit (the page takes no more).
    pub fn is_full(&self) -> bool {
        self.full
    }

    /// Whether nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.lines == 0
    }

    /// The lines appended.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// The text so far (each line ends with a newline).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text.
    pub fn into_text(self) -> String {
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_holds_whole_lines_within_both_limits_and_stays_full() {
        let budget = OutputBudget {
            max_chars: 20,
            max_lines: 0,
        };
        let mut page = budget.page(5, 0);
        assert!(page.push_line("12345")); // 6 of 15
        assert!(page.push_line("1234567")); // 14 of 15
        assert_eq!(page.room_chars(), Some(0));
        assert!(!page.push_line("1"));
        assert!(page.is_full());
        assert!(!page.push_line(""), "a full page takes nothing more");
        assert_eq!(page.text(), "12345\n1234567\n");
        assert_eq!(page.lines(), 2);
        let unlimited = OutputBudget::UNLIMITED.page(100, 100);
        assert_eq!(unlimited.room_chars(), None);
        // A reserve past the budget still leaves one line.
        let mut tiny = OutputBudget {
            max_chars: 50,
            max_lines: 3,
        }
        .page(100, 6);
        assert!(tiny.push_line("x"));
        assert!(!tiny.push_line("y"));
    }

    #[test]
    fn characters_not_bytes_are_counted() {
        let budget = OutputBudget {
            max_chars: 4,
            max_lines: 0,
        };
        assert!(budget.fits("äöü\n"));
        let mut page = budget.page(0, 0);
        assert!(page.push_line("äöü"));
    }
}
