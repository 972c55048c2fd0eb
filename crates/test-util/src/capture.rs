//! Everything the process logs, at every level, through both `log` and `tracing`: for tests that
//! prove no secret (a token, an env value, stdin) reaches a log through any dependency.
//!
//! [`install`] sets the process's global `log` logger (level TRACE) and its global `tracing`
//! subscriber (every callsite enabled, span fields included), once; [`Captured::find`] then
//! looks for a secret as text, in hex (how `tungstenite` prints frame payloads) and in base64.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};

/// The log so far, shared by the logger and the subscriber.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<String>>);

impl std::fmt::Debug for Captured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Captured")
            .field("bytes", &self.0.lock().map(|s| s.len()).unwrap_or(0))
            .finish()
    }
}

impl Captured {
    fn push(&self, line: &str) {
        if let Ok(mut s) = self.0.lock() {
            s.push_str(line);
            s.push('\n');
        }
    }

    /// How many bytes were logged so far.
    pub fn len(&self) -> usize {
        self.0.lock().map(|s| s.len()).unwrap_or(0)
    }

    /// True if nothing was logged.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True if a line from `target` (a module path prefix) was logged.
    pub fn has_target(&self, target: &str) -> bool {
        self.0
            .lock()
            .map(|s| s.lines().any(|l| l.starts_with(&format!("[{target}"))))
            .unwrap_or(false)
    }

    /// The first line containing `secret` as text, in lowercase hex, or in standard base64
    /// (aligned at any of the three offsets).
    pub fn find(&self, secret: &[u8]) -> Option<String> {
        let log = self.0.lock().ok()?;
        let mut needles = vec![
            String::from_utf8_lossy(secret).into_owned(),
            secret.iter().fold(String::new(), |mut h, b| {
                let _ = write!(h, "{b:02x}");
                h
            }),
        ];
        for skip in 0..3 {
            // The middle of the base64 of anything that contains the secret at this offset.
            let padded: Vec<u8> = std::iter::repeat_n(b'\0', skip)
                .chain(secret.iter().copied())
                .collect();
            let b64 = base64_std(&padded);
            let (start, end) = (skip.div_ceil(3) * 4, b64.len().saturating_sub(4));
            if end > start + 8 {
                needles.push(b64[start..end].to_owned());
            }
        }
        log.lines()
            .find(|l| {
                needles
                    .iter()
                    .any(|n| n.len() >= 6 && l.contains(n.as_str()))
            })
            .map(str::to_owned)
    }
}

fn base64_std(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

struct Logger(Captured);

impl log::Log for Logger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        self.0.push(&format!(
            "[{} {}] {}",
            record.target(),
            record.level(),
            record.args()
        ));
    }
    fn flush(&self) {}
}

struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={value}", field.name());
    }
    fn record_bytes(&mut self, field: &Field, value: &[u8]) {
        let _ = write!(
            self.0,
            " {}={}",
            field.name(),
            String::from_utf8_lossy(value)
        );
    }
}

struct Sub {
    log: Captured,
    next: AtomicU64,
}

impl Subscriber for Sub {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::always()
    }
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut line = format!(
            "[{} span {}]",
            span.metadata().target(),
            span.metadata().name()
        );
        span.record(&mut Fields(&mut line));
        self.log.push(&line);
        Id::from_u64(self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        let mut line = "[span-record]".to_owned();
        values.record(&mut Fields(&mut line));
        self.log.push(&line);
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut line = format!(
            "[{} {}]",
            event.metadata().target(),
            event.metadata().level()
        );
        event.record(&mut Fields(&mut line));
        self.log.push(&line);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Installs the capture (once per process) and returns it. Panics if another logger or global
/// subscriber was installed first: the test would not see everything.
pub fn install() -> Captured {
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    CAPTURED
        .get_or_init(|| {
            let captured = Captured::default();
            log::set_boxed_logger(Box::new(Logger(captured.clone()))).expect("no other log logger");
            log::set_max_level(log::LevelFilter::Trace);
            tracing::subscriber::set_global_default(Sub {
                log: captured.clone(),
                next: AtomicU64::new(0),
            })
            .expect("no other tracing subscriber");
            captured
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_secrets_as_text_hex_and_base64() {
        let c = Captured::default();
        c.push("frame payload: 0x7365637265742d7374646e");
        assert!(c.find(b"secret-stdn").is_some(), "hex");
        let c = Captured::default();
        c.push(&format!("body {}", base64_std(b"xxsecret-value-1yy")));
        assert!(c.find(b"secret-value-1").is_some(), "base64 at an offset");
        assert!(c.find(b"not-there-at-all").is_none());
        assert_eq!(base64_std(b"any carnal pleas"), "YW55IGNhcm5hbCBwbGVhcw==");
    }
}
