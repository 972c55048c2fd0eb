//! A hostile adapter: the worst order and the worst chunking a backend may legally produce.
//!
//! [`Hostile`] wraps any [`Exec`]. For every listing command built by `execseam-tools` (recognised
//! with [`NativeRequest::parse`]) it shuffles the records of stdout, and the lines of stderr; a
//! grep's matches are regrouped at random between the two legal layouts (`PATH\0L:T\n` per match,
//! or one `PATH\0` followed by several lines), with empty `PATH\0` records thrown in. Through
//! [`ExecStream`] (always offered, whatever the inner adapter does) every output is cut into
//! random chunks, stdout and stderr interleaved at random. Nothing else changes: the bytes of any
//! other command, the exit, the errors.
//!
//! No sandbox documents an order for any listing, so this is not a robustness test but the
//! expected behaviour of a real backend: a tool's result through `Hostile` must be byte-identical
//! to its result without it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use execseam_core::{
    BoxFuture, Capabilities, Command, Error, Event, EventStream, Exec, ExecStream, Output,
};
use execseam_tools_protocol::native::{self, NativeRequest};

/// SplitMix64: small, seedable, good enough to shuffle.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// The hostile wrapper; see the module docs.
pub struct Hostile {
    inner: Arc<dyn Exec>,
    seed: u64,
    calls: AtomicU64,
}

impl Hostile {
    /// Wraps `inner`; `seed` fixes every shuffle and cut (each call draws a fresh stream from it).
    pub fn new(inner: Arc<dyn Exec>, seed: u64) -> Hostile {
        Hostile {
            inner,
            seed,
            calls: AtomicU64::new(0),
        }
    }

    fn rng(&self) -> Rng {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let mut r = Rng(self.seed ^ n.wrapping_mul(0x2545_f491_4f6c_dd1d));
        r.next();
        r
    }
}

/// Shuffles the records of a listing's output (only for commands built by execseam-tools, and
/// only when the output parses: a typed failure passes through untouched).
fn scramble(cmd: &Command, mut out: Output, rng: &mut Rng) -> Output {
    let Some(req) = NativeRequest::parse(cmd) else {
        return out;
    };
    if native::Failure::from_output(&out).is_some() {
        return out;
    }
    let stdout = match req {
        NativeRequest::Grep(_) => match native::grep_records(&out.stdout) {
            Ok(recs) => {
                let mut recs: Vec<_> = recs
                    .into_iter()
                    .map(|r| (r.path.to_vec(), r.line, r.text.to_vec()))
                    .collect();
                rng.shuffle(&mut recs);
                let mut buf = Vec::with_capacity(out.stdout.len() + 64);
                let mut last: Option<Vec<u8>> = None;
                for (path, line, text) in recs {
                    // Same path as the previous match: sometimes continue its group.
                    let continue_group = last.as_ref() == Some(&path) && rng.below(2) == 0;
                    if !continue_group {
                        buf.extend_from_slice(&path);
                        buf.push(0);
                        if rng.below(4) == 0 {
                            // An empty group for the same file: legal, and meaningless.
                            buf.extend_from_slice(&path);
                            buf.push(0);
                        }
                    }
                    buf.extend_from_slice(line.to_string().as_bytes());
                    buf.push(b':');
                    buf.extend_from_slice(&text);
                    buf.push(b'\n');
                    last = Some(path);
                }
                Bytes::from(buf)
            }
            Err(_) => out.stdout.clone(),
        },
        _ => match native::records(&out.stdout) {
            Ok(recs) => {
                let mut recs: Vec<&[u8]> = recs.collect();
                rng.shuffle(&mut recs);
                let mut buf = Vec::with_capacity(out.stdout.len());
                for r in recs {
                    buf.extend_from_slice(r);
                    buf.push(0);
                }
                Bytes::from(buf)
            }
            Err(_) => out.stdout.clone(),
        },
    };
    let mut lines: Vec<&[u8]> = out.stderr.split_inclusive(|&b| b == b'\n').collect();
    rng.shuffle(&mut lines);
    let mut stderr = Vec::with_capacity(out.stderr.len() + 1);
    for l in lines {
        stderr.extend_from_slice(l);
        if l.last() != Some(&b'\n') {
            stderr.push(b'\n');
        }
    }
    if out.stderr.last().is_some_and(|&b| b != b'\n') {
        stderr.pop();
    }
    out.stdout = stdout;
    out.stderr = Bytes::from(stderr);
    out
}

/// Cuts `b` into random chunks (empty chunks included: a backend may send them).
fn chunks(b: &Bytes, rng: &mut Rng) -> Vec<Bytes> {
    let mut v = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let n = match rng.below(8) {
            0 => 0,
            1..=4 => 1 + rng.below(4),
            _ => 1 + rng.below(b.len() - at),
        };
        let end = (at + n).min(b.len());
        v.push(b.slice(at..end));
        at = end;
    }
    v
}

impl Exec for Hostile {
    fn provider(&self) -> &str {
        self.inner.provider()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            streaming: true,
            ..self.inner.capabilities()
        }
    }

    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        Box::pin(async move {
            let mut rng = self.rng();
            let out = self.inner.exec(command.clone()).await?;
            Ok(scramble(&command, out, &mut rng))
        })
    }

    fn streaming(&self) -> Option<&dyn ExecStream> {
        Some(self)
    }
}

impl ExecStream for Hostile {
    fn exec_stream(&self, command: Command) -> BoxFuture<'_, Result<EventStream, Error>> {
        Box::pin(async move {
            let mut rng = self.rng();
            let out = self.inner.exec(command.clone()).await?;
            let out = scramble(&command, out, &mut rng);
            let mut outs = chunks(&out.stdout, &mut rng);
            let mut errs = chunks(&out.stderr, &mut rng);
            outs.reverse();
            errs.reverse();
            let mut events = Vec::new();
            while !outs.is_empty() || !errs.is_empty() {
                let take_out = errs.is_empty() || (!outs.is_empty() && rng.below(2) == 0);
                if take_out {
                    events.push(Ok(Event::Stdout(outs.pop().unwrap_or_default())));
                } else {
                    events.push(Ok(Event::Stderr(errs.pop().unwrap_or_default())));
                }
            }
            events.push(Ok(Event::Exit(out.exit)));
            Ok(EventStream::new(iter_stream(events)))
        })
    }
}

/// The backend's answers recorded once and given again: a read-only check's hostile passes ask
/// the backend exactly what its direct pass asked, and what [`Hostile`] proves is about the
/// order and the chunking of an answer, not about asking twice (each re-asked command cost a
/// round trip, on Docker per call a container). A command not asked before goes to the backend
/// and is recorded; an error is never recorded.
pub struct Replay {
    inner: Arc<dyn Exec>,
    answers: Mutex<Vec<(Command, Output)>>,
}

impl Replay {
    /// Records what `inner` answers.
    pub fn new(inner: Arc<dyn Exec>) -> Replay {
        Replay {
            inner,
            answers: Mutex::new(Vec::new()),
        }
    }

    fn recorded(&self, command: &Command) -> Option<Output> {
        let answers = self.answers.lock().expect("the answers");
        answers
            .iter()
            .find(|(c, _)| c == command)
            .map(|(_, o)| o.clone())
    }
}

impl Exec for Replay {
    fn provider(&self) -> &str {
        self.inner.provider()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        Box::pin(async move {
            if let Some(out) = self.recorded(&command) {
                return Ok(out);
            }
            let out = self.inner.exec(command.clone()).await?;
            let mut answers = self.answers.lock().expect("the answers");
            answers.push((command, out.clone()));
            Ok(out)
        })
    }
}

/// A stream over a vector (the crate does not depend on futures-util).
fn iter_stream(
    items: Vec<Result<Event, Error>>,
) -> impl futures_core::Stream<Item = Result<Event, Error>> + Send + 'static {
    struct Iter(std::vec::IntoIter<Result<Event, Error>>);
    impl futures_core::Stream for Iter {
        type Item = Result<Event, Error>;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Self::Item>> {
            std::task::Poll::Ready(self.0.next())
        }
    }
    Iter(items.into_iter())
}

/// Counts of each record: the multiset a listing carries.
#[cfg(test)]
fn multiset(stdout: &[u8]) -> std::collections::BTreeMap<Vec<u8>, usize> {
    let mut m = std::collections::BTreeMap::new();
    if let Ok(recs) = native::records(stdout) {
        for r in recs {
            *m.entry(r.to_vec()).or_insert(0) += 1;
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use execseam_core::Exit;
    use std::future::Future;

    /// Answers its output to every command but `flaky`, which fails the first time; counts calls.
    struct Fixed(Output, AtomicU64);
    impl Exec for Fixed {
        fn provider(&self) -> &str {
            "fixed"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::FULL
        }
        fn exec(&self, c: Command) -> BoxFuture<'_, Result<Output, Error>> {
            let first = self.1.fetch_add(1, Ordering::Relaxed) == 0;
            let o = self.0.clone();
            Box::pin(async move {
                if first && c.program() == "flaky" {
                    return Err(Error::new(execseam_core::ErrorKind::Internal, "flaky"));
                }
                Ok(o)
            })
        }
    }

    fn fixed(o: Output) -> Arc<Fixed> {
        Arc::new(Fixed(o, AtomicU64::new(0)))
    }

    fn block<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn shuffles_listings_and_keeps_the_multiset() {
        let stdout: Vec<u8> = (0..50)
            .flat_map(|i| format!("/r/f{i}\0").into_bytes())
            .collect();
        let out = Output::new(stdout.clone(), "", Exit::Code(0));
        let h = Hostile::new(fixed(out), 7);
        let cmd = NativeRequest::list("/r", None).command().unwrap();
        let got = block(h.exec(cmd.clone())).unwrap();
        assert_ne!(
            got.stdout.as_ref(),
            stdout.as_slice(),
            "50 records stayed in order"
        );
        assert_eq!(multiset(&got.stdout), multiset(&stdout));
        // Streamed: chunks concatenate to a (differently) shuffled listing with the same records.
        let s = block(async { h.exec_stream(cmd).await.unwrap().collect().await }).unwrap();
        assert_eq!(multiset(&s.stdout), multiset(&stdout));
        // Any other command passes through untouched.
        let plain = block(h.exec(Command::new(["true"]).unwrap())).unwrap();
        assert_eq!(plain.stdout.as_ref(), stdout.as_slice());
    }

    #[test]
    fn replays_a_recorded_answer_and_never_an_error() {
        let inner = fixed(Output::new("out", "", Exit::Code(0)));
        let r = Replay::new(inner.clone());
        let run = |argv: &str| block(r.exec(Command::new([argv]).unwrap()));
        let calls = || inner.1.load(Ordering::Relaxed);
        assert!(run("flaky").is_err());
        assert_eq!(
            run("flaky").unwrap().stdout.as_ref(),
            b"out",
            "an error is asked again"
        );
        assert_eq!(calls(), 2);
        run("a").unwrap();
        run("a").unwrap();
        assert_eq!(calls(), 3, "asked again: replayed");
        run("b").unwrap();
        assert_eq!(calls(), 4, "another command: asked");
    }

    #[test]
    fn regroups_grep_matches_legally() {
        let stdout = b"/r/a\x001:x\n/r/a\x002:y\n/r/b\x005:z\0w\n".to_vec();
        let out = Output::new(stdout.clone(), "", Exit::Code(0));
        let h = Hostile::new(fixed(out), 3);
        let req = native::GrepRequest {
            root: "/r".into(),
            pattern: "x".into(),
            start: String::new(),
            name: None,
            fixed: false,
            ignore_case: false,
        };
        let cmd = NativeRequest::Grep(req).command().unwrap();
        let key = |b: &[u8]| {
            let mut v: Vec<_> = native::grep_records(b)
                .unwrap()
                .into_iter()
                .map(|r| (r.path.to_vec(), r.line, r.text.to_vec()))
                .collect();
            v.sort();
            v
        };
        for _ in 0..20 {
            let got = block(h.exec(cmd.clone())).unwrap();
            assert_eq!(key(&got.stdout), key(&stdout));
        }
    }
}
