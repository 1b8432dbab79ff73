//! The `toolhost` binary's standard output. Every command writes it through [`outln!`],
//! which returns the write's error (a [`StdoutError`]) instead of panicking as `println!`
//! does; commands pass it up with `?`, and `main` turns a closed pipe (`toolhost list |
//! head -1`) into a quiet exit 0, as ripgrep does. Standard error stays `eprintln!`.
//! Also here: the aligned tables and one-line summaries the commands print.

use std::fmt;
use std::io::{self, Write as _};

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

/// Writes `args` and a newline to stdout, and flushes it (so a closed pipe is noticed by
/// the command that wrote, not ignored at exit).
pub(crate) fn line(args: fmt::Arguments<'_>) -> Result<(), StdoutError> {
    let mut out = io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .map_err(StdoutError)
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
