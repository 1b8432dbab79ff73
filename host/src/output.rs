//! The `toolhost` binary's standard output. Every command writes it through [`outln!`],
//! which returns the write's error instead of panicking as `println!` does; commands pass
//! it up with `?`, and [`exit_code`] turns a closed pipe (`toolhost list | head -1`) into
//! a quiet exit 0, as ripgrep does. Standard error stays `eprintln!`.

use std::fmt;
use std::io::{self, Write as _};
use std::process::ExitCode;

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

/// Writes `args` and a newline to stdout, and flushes it (so a closed pipe is noticed by
/// the command that wrote, not ignored at exit).
pub(crate) fn line(args: fmt::Arguments<'_>) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_fmt(args)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// A command's exit code: its own, 0 if stdout was closed under it (whoever read it has
/// all they wanted), else 1 with the write error on stderr.
pub(crate) fn exit_code(outcome: io::Result<ExitCode>) -> ExitCode {
    match outcome {
        Ok(code) => code,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: could not write to standard output: {e}");
            ExitCode::FAILURE
        }
    }
}
