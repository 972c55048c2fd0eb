//! No env value and no stdin ever reaches tracing, Debug output or an error message.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use execseam_core::{Command, Exec};
use execseam_local::LocalExec;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// A subscriber that keeps every field of every span and event, as text.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<String>>);

impl Visit for Capture {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        let mut s = self.0.lock().unwrap();
        s.push_str(&format!("{field}={value:?} "));
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        span.record(&mut self.clone());
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        values.record(&mut self.clone());
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        event.record(&mut self.clone());
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

const ENV_SECRET: &str = "s3cr3t-env-value";
const STDIN_SECRET: &str = "s3cr3t-stdin-bytes";

#[test]
fn secrets_never_reach_tracing_debug_or_errors() {
    let capture = Capture::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (ok, err, cmd_debug) = tracing::subscriber::with_default(capture.clone(), || {
        rt.block_on(async {
            let exec = LocalExec::new();
            let cmd = Command::builder(["sh", "-c", "cat >/dev/null; exit 3"])
                .env("API_TOKEN", ENV_SECRET)
                .stdin(STDIN_SECRET)
                .build()
                .unwrap();
            let cmd_debug = format!("{cmd:?} {cmd:#?}");
            let ok = exec.exec(cmd.clone()).await.unwrap();
            let failing = cmd
                .into_builder()
                .workdir("/nonexistent/execseam")
                .build()
                .unwrap();
            let err = exec.exec(failing).await.unwrap_err();
            (ok, err, cmd_debug)
        })
    });
    assert_eq!(ok.exit, execseam_core::Exit::Code(3));
    let traced = capture.0.lock().unwrap().clone();
    assert!(traced.contains("exec"), "the capture works: {traced}");
    let everything = format!(
        "{traced} {cmd_debug} {err} {err:?} {ok:?} {:?}",
        LocalExec::new()
    );
    for secret in [ENV_SECRET, STDIN_SECRET] {
        assert!(
            !everything.contains(secret),
            "{secret} leaked: {everything}"
        );
    }
}
