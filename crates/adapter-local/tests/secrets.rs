//! No env value and no stdin ever reaches tracing, Debug output or an error message.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use execseam_core::{Command, Exec};
use execseam_local::LocalExec;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// A subscriber that keeps every field of every span and event, as text; with `spans`, each
/// span's name and what each record and event is go in front of its fields.
#[derive(Clone, Default)]
struct Capture {
    text: Arc<Mutex<String>>,
    spans: bool,
}

impl Capture {
    fn spans() -> Capture {
        Capture {
            spans: true,
            ..Capture::default()
        }
    }

    /// Adds `what` in front of the next fields, with `spans`.
    fn mark(&self, what: impl FnOnce() -> String) {
        if self.spans {
            self.text.lock().unwrap().push_str(&what());
        }
    }
}

impl Visit for Capture {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        let mut s = self.text.lock().unwrap();
        s.push_str(&format!("{field}={value:?} "));
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        self.mark(|| format!("\nspan {} ", span.metadata().name()));
        span.record(&mut self.clone());
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        self.mark(|| "| record ".to_owned());
        values.record(&mut self.clone());
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        self.mark(|| "| event ".to_owned());
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
    let traced = capture.text.lock().unwrap().clone();
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

#[test]
fn lifecycle_calls_run_in_spans_with_the_sandbox_id_and_no_spec_values() {
    use execseam_core::{ListFilter, Provider, SandboxSpec};
    // Through the layers' `TracedProvider`, as the facade's registry builds every provider (the
    // spans are a middleware: neither the contract nor the adapter emits them).
    let spans = Capture::spans();
    let dir = std::env::temp_dir().join(format!("execseam-local-spans-{}", std::process::id()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let id = tracing::subscriber::with_default(spans.clone(), || {
        rt.block_on(async {
            let p = execseam_layers::TracedProvider::new(
                execseam_local::LocalProvider::new(
                    execseam_local::LocalConfig::new().sandbox_root(&dir),
                )
                .unwrap(),
            );
            let sb = Provider::create(
                &p,
                SandboxSpec::new()
                    .with_env("API_TOKEN", ENV_SECRET)
                    .with_label("team", STDIN_SECRET),
            )
            .await
            .unwrap();
            let id = sb.id().to_owned();
            sb.set_owned(false);
            drop(sb);
            Provider::connect(&p, &id).await.unwrap();
            let listed = Provider::list(&p, &ListFilter::new()).await.unwrap();
            assert!(listed.iter().any(|i| i.id == id));
            Provider::destroy(&p, &id).await.unwrap();
            let e = Provider::connect(&p, "local-nosuchsandbox")
                .await
                .err()
                .unwrap();
            assert!(!format!("{e} {e:?}").contains(ENV_SECRET));
            id
        })
    });
    let _ = std::fs::remove_dir_all(&dir);
    let log = spans.text.lock().unwrap().clone();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("span lifecycle "))
        .collect();
    let op = |o: &str| {
        lines
            .iter()
            .copied()
            .filter(|l| l.contains(&format!("operation=\"{o}\"")))
            .collect::<Vec<_>>()
    };
    // create records the new id once it returns; connect and destroy carry the id asked for.
    let create = op("create");
    assert_eq!(create.len(), 1, "{log}");
    assert!(
        create[0].contains("provider=\"local\"")
            && create[0].contains(&format!("record sandbox=\"{id}\""))
            && create[0].contains("ok=true"),
        "{log}"
    );
    let connect = op("connect");
    assert_eq!(connect.len(), 2, "{log}");
    assert!(connect[0].contains(&format!("sandbox=\"{id}\"")), "{log}");
    // The failed connect records its kind.
    assert!(
        connect[1].contains("sandbox=\"local-nosuchsandbox\"")
            && connect[1].contains("kind=\"not-found\"")
            && connect[1].contains("ok=false"),
        "{log}"
    );
    assert!(op("list")[0].contains("record count="), "{log}");
    assert!(
        op("destroy")[0].contains(&format!("sandbox=\"{id}\"")),
        "{log}"
    );
    for secret in [ENV_SECRET, STDIN_SECRET] {
        assert!(!log.contains(secret), "{secret} leaked: {log}");
    }
}
