//! The CLI's own lines on stdout. A reader that went away (`execseam read --json BIG | head -c
//! 10`) is a normal end for a Unix tool, not a panic (issue 38, D31): Rust ignores SIGPIPE, so
//! the write fails with EPIPE and std's `println!` panics. Restoring SIGPIPE's default instead
//! would kill the process on any closed socket too.

use std::io::Write;

/// The status after stdout closed under us: 128 + SIGPIPE, what a shell shows for a writer
/// that SIGPIPE ended.
pub const CLOSED_STDOUT: i32 = 141;

/// Writes `args` (and a newline) to stdout; a closed stdout ends the process quietly with
/// [`CLOSED_STDOUT`], any other write error with a line on stderr and status 125.
pub fn write(args: std::fmt::Arguments<'_>, newline: bool) {
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| {
        if newline {
            out.write_all(b"\n")
        } else {
            Ok(())
        }
    });
    if let Err(e) = written {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(CLOSED_STDOUT);
        }
        eprintln!("execseam: writing to stdout: {e}");
        std::process::exit(i32::from(crate::INFRA_FAILURE));
    }
}

/// Prints a listing: with `json`, one JSON array of `to_json` of every item; else `line` of each
/// item on a line of its own.
pub fn list<T>(
    json: bool,
    items: &[T],
    to_json: impl Fn(&T) -> serde_json::Value,
    line: impl Fn(&T) -> String,
) {
    if json {
        let v: Vec<_> = items.iter().map(to_json).collect();
        println!("{}", serde_json::Value::Array(v));
    } else {
        for i in items {
            println!("{}", line(i));
        }
    }
}
