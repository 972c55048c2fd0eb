//! The glob path over one million paths, side by side with the shell pipeline it replaces.
//!
//! One million paths (1000 directories × 1000 files, names pseudo-random, in a shuffled order as
//! a filesystem would give them) are recorded once as `find -print0` output. Then, in the same
//! run and over the same records:
//!
//! - **execseam**: `Tools::glob(root, "**", LIMIT)` through a fake `Exec` that replays the
//!   recording: split the NUL records, strip the root, match, sort all in byte order, check for
//!   duplicates, truncate, build the result.
//! - **pipeline**: `LC_ALL=C sort -z < recording | head -z -n LIMIT`, run for real by `sh` (the
//!   recording stands in for `find . -print0`, so neither side pays for the walk).
//!
//! Each side runs `ROUNDS` times; the best and median times are printed with the ratio of the
//! medians. Target: execseam within 1.2× of the pipeline. `cargo bench -p execseam-tools`.

use std::io::Write as _;
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use execseam_core::{BoxFuture, Capabilities, Command, Error, Exec, Exit, Output};
use execseam_tools::Tools;

const DIRS: usize = 1000;
const FILES: usize = 1000;
const LIMIT: usize = 1000;
const ROUNDS: usize = 5;
const ROOT: &str = "/w";

/// SplitMix64, for reproducible names and order.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The relative paths, in a shuffled "filesystem" order.
fn paths() -> Vec<String> {
    let mut rng = Rng(42);
    let mut v = Vec::with_capacity(DIRS * FILES);
    for d in 0..DIRS {
        let dir = format!("pkg-{:08x}/src", rng.next() as u32);
        for f in 0..FILES {
            v.push(format!(
                "{dir}/file_{:06x}_{f}.rs",
                rng.next() as u32 & 0xff_ffff
            ));
        }
        let _ = d;
    }
    for i in (1..v.len()).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

struct Replay(Bytes);

impl Exec for Replay {
    fn provider(&self) -> &str {
        "replay"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::FULL
    }
    fn exec(&self, _: Command) -> BoxFuture<'_, Result<Output, Error>> {
        let stdout = self.0.clone();
        Box::pin(async move { Ok(Output::new(stdout, Bytes::new(), Exit::Code(0))) })
    }
}

fn stats(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (v[0], v[v.len() / 2])
}

fn ms(d: Duration) -> String {
    format!("{:8.1} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run a smaller,
    // quicker version there so the bench target stays tested.
    let quick = !std::env::args().any(|a| a == "--bench");
    let paths = paths();
    let paths = if quick { &paths[..50_000] } else { &paths[..] };
    let mut absolute = Vec::with_capacity(paths.len() * 40);
    let mut dotted = Vec::with_capacity(paths.len() * 40);
    for p in paths {
        absolute.extend_from_slice(format!("{ROOT}/{p}\0").as_bytes());
        dotted.extend_from_slice(format!("./{p}\0").as_bytes());
    }
    let recording =
        std::env::temp_dir().join(format!("execseam-bench-glob-{}", std::process::id()));
    std::fs::File::create(&recording)
        .and_then(|mut f| f.write_all(&dotted))
        .expect("write the recording");
    let replay = Replay(Bytes::from(absolute));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");

    // The expected first LIMIT paths, to check both sides.
    let mut sorted: Vec<&str> = paths.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    sorted.truncate(LIMIT);

    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let l = rt
            .block_on(Tools::new(&replay).glob(ROOT, "**", LIMIT))
            .expect("glob");
        ours.push(t.elapsed());
        assert_eq!(l.items.len(), LIMIT);
        assert_eq!(l.omitted, paths.len() - LIMIT);
        assert!(
            l.items
                .iter()
                .zip(&sorted)
                .all(|(a, b)| a.as_str() == Some(*b))
        );

        let t = Instant::now();
        let out = Process::new("sh")
            .args([
                "-c",
                "LC_ALL=C sort -z < \"$1\" | head -z -n \"$2\"",
                "sh",
                recording.to_str().expect("utf-8 temp dir"),
                &LIMIT.to_string(),
            ])
            .stderr(Stdio::inherit())
            .output()
            .expect("run the pipeline");
        theirs.push(t.elapsed());
        assert!(out.status.success(), "the pipeline failed: {out:?}");
        let got: Vec<&[u8]> = out
            .stdout
            .split(|&b| b == 0)
            .filter(|r| !r.is_empty())
            .collect();
        assert_eq!(got.len(), LIMIT);
        assert!(
            got.iter()
                .zip(&sorted)
                .all(|(a, b)| &a[2..] == b.as_bytes())
        );
    }
    let _ = std::fs::remove_file(&recording);
    let (ob, om) = stats(ours);
    let (tb, tm) = stats(theirs);
    let ratio = om.as_secs_f64() / tm.as_secs_f64();
    println!(
        "glob over {} paths, limit {LIMIT}, {ROUNDS} rounds{}",
        paths.len(),
        if quick {
            " (quick: run with `cargo bench` for one million)"
        } else {
            ""
        }
    );
    println!(
        "  execseam Tools::glob (collect, sort, truncate): best {} median {}",
        ms(ob),
        ms(om)
    );
    println!(
        "  find -print0 | LC_ALL=C sort -z | head -z -n:    best {} median {}",
        ms(tb),
        ms(tm)
    );
    println!(
        "  ratio (execseam / pipeline, medians): {ratio:.2}x (target <= 1.20x): {}",
        if ratio <= 1.2 {
            "ok"
        } else {
            "SLOWER THAN TARGET"
        }
    );
}
