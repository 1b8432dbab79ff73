//! The `toolhost` binary's standard output and error. Every command writes stdout
//! through [`outln!`], which returns the write's error (a [`StdoutError`]) instead of
//! panicking as `println!` does; commands pass it up with `?`, and `main` turns a closed
//! pipe (`toolhost list | head -1`) into a quiet exit 0, as ripgrep does. Standard error
//! is written with [`errln!`]. Both escape control characters (a plugin's description,
//! output or error may carry terminal escape sequences) when they write to a terminal.
//! Also here: the aligned tables and one-line summaries the commands print.

use std::fmt;
use std::io::{self, IsTerminal as _, Write as _};
use std::sync::OnceLock;

/// Writes one line (formatted like `println!`) to stdout; `Err` if stdout is closed or
/// failing. Use `?` to end the command.
macro_rules! outln {
    () => {
        $crate::output::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}
pub(crate) use outln;

/// Writes one line (formatted like `eprintln!`) to stderr, escaping control characters
/// when stderr is a terminal. A failing stderr is ignored (there is nowhere left to say
/// so).
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::err_line(format_args!($($arg)*))
    };
}
pub(crate) use errln;

/// Standard output could not be written.
#[derive(Debug, thiserror::Error)]
#[error("could not write to standard output: {0}")]
pub(crate) struct StdoutError(#[source] io::Error);

impl StdoutError {
    /// Whether the reader went away (a closed pipe): whoever read has all they wanted.
    pub(crate) fn is_closed_pipe(&self) -> bool {
        self.0.kind() == io::ErrorKind::BrokenPipe
    }
}

/// Whether stdout and stderr are terminals (asked once).
fn terminals() -> (bool, bool) {
    static TERMINALS: OnceLock<(bool, bool)> = OnceLock::new();
    *TERMINALS.get_or_init(|| (io::stdout().is_terminal(), io::stderr().is_terminal()))
}

/// Writes `args` to `out`, with control characters escaped if `terminal`.
fn write_args(
    out: &mut impl io::Write,
    args: fmt::Arguments<'_>,
    terminal: bool,
) -> io::Result<()> {
    if !terminal {
        return out.write_fmt(args);
    }
    let text = args
        .as_str()
        .map_or_else(|| fmt::format(args), str::to_owned);
    out.write_all(toolhost::escape_controls(&text).as_bytes())
}

/// Writes `args` and a newline to stdout, and flushes it (so a closed pipe is noticed by
/// the command that wrote, not ignored at exit).
pub(crate) fn line(args: fmt::Arguments<'_>) -> Result<(), StdoutError> {
    let mut out = io::stdout().lock();
    write_args(&mut out, args, terminals().0)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .map_err(StdoutError)
}

/// Writes `text` to stdout exactly as it is (control characters escaped on a terminal),
/// and flushes it.
pub(crate) fn raw(text: &str) -> Result<(), StdoutError> {
    let mut out = io::stdout().lock();
    let text = toolhost::for_terminal(text, terminals().0);
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(StdoutError)
}

/// Writes `args` and a newline to stderr.
pub(crate) fn err_line(args: fmt::Arguments<'_>) {
    let mut err = io::stderr().lock();
    let _ = write_args(&mut err, args, terminals().1).and_then(|()| err.write_all(b"\n"));
}

/// A command's warning: `warning: ...` on stderr, or a warning event when the log is
/// JSON lines (`TOOLHOST_LOG_FORMAT=json`), so a log shipper reads it like the rest.
pub(crate) fn warning(args: fmt::Arguments<'_>) {
    if crate::json_log::enabled() {
        tracing::warn!("{args}");
    } else {
        err_line(format_args!("warning: {args}"));
    }
}

/// A command's note (something to know, not a problem): `note: ...` on stderr, or an
/// event at warn level (so the default filter keeps it) when the log is JSON lines.
pub(crate) fn note(args: fmt::Arguments<'_>) {
    if crate::json_log::enabled() {
        tracing::warn!("{args}");
    } else {
        err_line(format_args!("note: {args}"));
    }
}

/// Prints a table with aligned columns.
pub(crate) fn print_table<const N: usize>(
    header: &[&str; N],
    rows: &[[String; N]],
) -> Result<(), StdoutError> {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == N {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        outln!("{}", out.trim_end())
    };
    line(header.to_vec())?;
    for row in rows {
        line(row.iter().map(String::as_str).collect())?;
    }
    Ok(())
}

/// The first line of `text`, cut to `max` characters.
pub(crate) fn summary(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    if line.chars().count() <= max {
        line.to_owned()
    } else {
        let cut: String = line.chars().take(max.saturating_sub(3)).collect();
        format!("{cut}...")
    }
}
