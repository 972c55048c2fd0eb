//! `cargo xtask bench [--quick]`: the benchmark suite. Builds the suite's binaries (timed), runs
//! them, prints ONE table of side-by-side rows and writes `docs/performance.md` (`--quick`: a
//! smoke run with fewer pairs, written to `target/bench-quick.md` instead). While it builds, it
//! prepares what the rows need besides the build ([`crate::bench_setup`]: the SDKs' virtualenvs,
//! P4's tree, podman, PostgreSQL, hyperfine), so a clean clone needs nothing else.
//!
//! Every row comes from a binary's stdout as one `ROW\t...` line (see [`Row::parse`]): A and B
//! were measured alternating in the same run against the same emulator process, so the ratio
//! holds under whatever load the machine had. The other lines are progress and go to stderr.
//!
//! `--rows FILE` renders the table and the document from a saved stdout of the suite's binaries.
//! `--rows FILE --merge` puts FILE's rows into the document's table in place of the rows of the
//! same groups (e.g. one adapter's, from `EXECSEAM_BENCH_ONLY=<adapter>`), keeping every other
//! row's line as it was and saying in the document which rows came from which run.
//! `--pairs N` sets the pairs per row (default 200; fewer is a shorter, noisier run: the table's
//! `n` column shows it). `cargo xtask bench --target <name>` runs one of the per-crate bench targets in [`BENCHES`].

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::{bench_setup, cargo, root, run_cmd};

/// `(package, bench target)`: the benchmarks of the workspace. The first two make the suite's
/// table; the others are per-crate benches with their own output (`--target <name>`).
const BENCHES: &[(&str, &str)] = &[
    ("execseam-reliability", "suite"),
    ("execseam-server", "load"),
    ("execseam-local", "overhead"),
    ("execseam-tools", "glob"),
    ("execseam-modal", "exec_latency"),
    ("execseam-chrono", "latency"),
    ("execseam-vercel", "sdk"),
    ("execseam-daytona", "exec_route"),
    ("execseam-northflank", "sdk"),
    ("execseam-docker", "latency"),
    ("execseam-emulator-kit", "launcher"),
    ("execseam-agentcore", "sdk"),
    ("execseam-sprites", "memory"),
];

/// One row of the table: A against B (times in milliseconds; lower is better), or A alone.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub section: String,
    pub name: String,
    pub a: String,
    pub a_p50: Option<f64>,
    pub a_p90: Option<f64>,
    pub b: String,
    pub b_p50: Option<f64>,
    pub b_p90: Option<f64>,
    /// Pairs (or samples) behind the quantiles.
    pub n: usize,
    /// The ratio A/B (p50) must be at most this.
    pub target: Option<f64>,
    pub note: String,
}

fn num(s: &str) -> Result<Option<f64>, String> {
    if s == "-" {
        return Ok(None);
    }
    s.parse().map(Some).map_err(|_| format!("bad number {s:?}"))
}

fn cell(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

impl Row {
    /// `ROW\tsection\tname\ta\ta_p50\ta_p90\tb\tb_p50\tb_p90\tn\ttarget\tnote` (`-`: none).
    pub fn parse(line: &str) -> Result<Row, String> {
        let f: Vec<&str> = line
            .strip_prefix("ROW\t")
            .ok_or("not a ROW line")?
            .split('\t')
            .collect();
        let [section, name, a, a50, a90, b, b50, b90, n, target, note] = f[..] else {
            return Err(format!(
                "a ROW line has 11 fields, this has {}: {line:?}",
                f.len()
            ));
        };
        Ok(Row {
            section: section.into(),
            name: name.into(),
            a: a.into(),
            a_p50: num(a50)?,
            a_p90: num(a90)?,
            b: b.into(),
            b_p50: num(b50)?,
            b_p90: num(b90)?,
            n: n.parse().map_err(|_| format!("bad count {n:?}"))?,
            target: num(target)?,
            note: note.into(),
        })
    }

    pub fn ratio(&self) -> Option<f64> {
        Some(self.a_p50? / self.b_p50?)
    }

    pub fn ratio_p90(&self) -> Option<f64> {
        Some(self.a_p90? / self.b_p90?)
    }

    /// `ok`, `ABOVE` (over target) or empty (no target).
    pub fn verdict(&self) -> &'static str {
        match (self.ratio(), self.target) {
            (Some(r), Some(t)) if r <= t => "ok",
            (Some(_), Some(_)) => "ABOVE",
            (None, Some(_)) => "n/a",
            _ => "",
        }
    }

    fn cells(&self) -> [String; 12] {
        [
            format!("{} {}", self.section, self.name),
            self.a.clone(),
            cell(self.a_p50, 2),
            cell(self.a_p90, 2),
            self.b.clone(),
            cell(self.b_p50, 2),
            cell(self.b_p90, 2),
            cell(self.ratio(), 2),
            cell(self.ratio_p90(), 2),
            match self.target {
                Some(t) => format!("<= {t} {}", self.verdict()),
                None => String::new(),
            },
            self.n.to_string(),
            self.note.clone(),
        ]
    }
}

const HEADER: [&str; 12] = [
    "row", "A", "A p50", "A p90", "B", "B p50", "B p90", "A/B p50", "A/B p90", "target", "n",
    "notes",
];

/// The table as aligned text (times in ms).
pub fn render_text(rows: &[Row]) -> String {
    let cells: Vec<[String; 12]> = rows.iter().map(Row::cells).collect();
    let mut width = HEADER.map(|h| h.chars().count());
    for c in &cells {
        for (w, s) in width.iter_mut().zip(c) {
            *w = (*w).max(s.chars().count());
        }
    }
    let line = |c: &[String]| {
        let mut s = String::new();
        for (i, (v, w)) in c.iter().zip(width).enumerate() {
            if i + 1 == c.len() {
                s.push_str(v);
            } else {
                s.push_str(v);
                s.push_str(&" ".repeat(w - v.chars().count() + 2));
            }
        }
        s.trim_end().to_owned() + "\n"
    };
    let mut out = line(&HEADER.map(String::from));
    for c in &cells {
        out.push_str(&line(c));
    }
    out
}

/// The table as Markdown (times in ms); `|` in a cell is escaped.
pub fn render_markdown(rows: &[Row]) -> String {
    let mut out = format!("| {} |\n", HEADER.join(" | "));
    out.push_str(&format!("|{}\n", "---|".repeat(HEADER.len())));
    out.push_str(&markdown_rows(rows));
    out
}

/// The Markdown lines of `rows`, without the header.
fn markdown_rows(rows: &[Row]) -> String {
    let esc = |s: &str| s.replace('|', "\\|");
    let mut out = String::new();
    for r in rows {
        let c = r.cells();
        out.push_str(&format!(
            "| {} |\n",
            c.iter().map(|s| esc(s)).collect::<Vec<_>>().join(" | ")
        ));
    }
    out
}

/// The rows in their table order: each group (a section and the part of the name before `:`,
/// e.g. `P2 daytona`) where its first row arrived, its rows in the order they arrived. The
/// suite prints some rows late (P2's latency rows with injected latency, run together at the
/// end); they join their provider's rows.
pub fn table_order(mut rows: Vec<Row>) -> Vec<Row> {
    let mut first: Vec<String> = Vec::new();
    for r in &rows {
        let g = group(r);
        if !first.contains(&g) {
            first.push(g);
        }
    }
    rows.sort_by_key(|r| first.iter().position(|g| *g == group(r)));
    rows
}

/// A row's group: its section and the part of its name before `:` (`P2 daytona`).
fn group(r: &Row) -> String {
    format!("{} {}", r.section, r.name.split(':').next().unwrap_or(""))
}

/// The group of a Markdown table line of [`markdown_rows`] (`None`: not a row).
fn group_of_line(line: &str) -> Option<String> {
    let first = line.strip_prefix("| ")?.split(" | ").next()?;
    if first == HEADER[0] {
        return None;
    }
    let (section, name) = first.split_once(' ')?;
    Some(format!(
        "{section} {}",
        name.split(':').next().unwrap_or("")
    ))
}

/// `--merge`: `rows` in place of the rows of their groups in the document `old`'s generated
/// table (new groups after the last row); every other line as it was; the line of rows above
/// target made again; a line before the table names the merged groups and their run.
pub fn merge(old: &str, rows: &[Row], meta: &Meta) -> Result<String, String> {
    let (Some(b), Some(e)) = (old.find(BEGIN), old.find(END)) else {
        return Err("docs/performance.md has no generated table to merge into".into());
    };
    let mut groups: Vec<String> = Vec::new();
    for r in rows {
        if !groups.contains(&group(r)) {
            groups.push(group(r));
        }
    }
    let of = |g: &str| {
        rows.iter()
            .filter(|r| group(r) == g)
            .cloned()
            .collect::<Vec<_>>()
    };
    let mut lines: Vec<String> = Vec::new();
    let mut placed: Vec<String> = Vec::new();
    let mut last_row = None;
    for line in old[b + BEGIN.len()..e].lines() {
        if line.starts_with("Above target in this run:") {
            continue;
        }
        match group_of_line(line) {
            Some(g) if groups.contains(&g) => {
                if !placed.contains(&g) {
                    lines.extend(markdown_rows(&of(&g)).lines().map(str::to_owned));
                    placed.push(g);
                }
            }
            Some(_) => lines.push(line.to_owned()),
            None if line.starts_with("| ") || line.starts_with("|---") => {
                lines.push(line.to_owned())
            }
            None => {
                lines.push(line.to_owned());
                continue;
            }
        }
        last_row = Some(lines.len());
    }
    let last_row = last_row.ok_or("the generated part of docs/performance.md has no table")?;
    let rest: Vec<Row> = groups
        .iter()
        .filter(|g| !placed.contains(g))
        .flat_map(|g| of(g))
        .collect();
    let tail = lines.split_off(last_row);
    lines.extend(markdown_rows(&rest).lines().map(str::to_owned));
    let above: Vec<String> = lines
        .iter()
        .filter(|l| l.contains(" ABOVE | "))
        .filter_map(|l| Some(l.strip_prefix("| ")?.split(" | ").next()?.to_owned()))
        .collect();
    if !above.is_empty() {
        lines.push(String::new());
        lines.push(format!(
            "Above target in this run: {} (see the explanations below).",
            above.join("; ")
        ));
    }
    lines.extend(tail.into_iter().skip_while(|l| l.is_empty()));
    let header = lines
        .iter()
        .position(|l| l.starts_with(&format!("| {} |", HEADER[0])))
        .ok_or("the generated table has no header")?;
    let note = format!(
        "Rows of {} from a later run merged in (`cargo xtask bench --rows FILE --merge`) at commit `{}`; load average {} at its start, {} at its end.",
        groups.join(", "),
        meta.commit,
        meta.load_before,
        meta.load_after
    );
    lines.splice(header..header, [note, String::new()]);
    let mut generated = lines.join("\n");
    generated.push('\n');
    Ok(format!(
        "{}{BEGIN}{generated}{END}{}",
        &old[..b],
        &old[e + END.len()..]
    ))
}

const BEGIN: &str = "<!-- BEGIN cargo xtask bench -->";
const END: &str = "<!-- END cargo xtask bench -->";

/// Rows over their target, for the document's explanations.
pub fn above_target(rows: &[Row]) -> Vec<&Row> {
    rows.iter().filter(|r| r.verdict() == "ABOVE").collect()
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The executables of the targets cargo's JSON messages (`--message-format json`) report:
/// (target name, path). Read without a JSON parser: cargo writes each message on one line with
/// `"target":{..."name":"<name>"...}` and `"executable":"<path>"` (null for a library).
fn executables(stdout: &str) -> Vec<(String, PathBuf)> {
    let string_after = |line: &str, key: &str| -> Option<String> {
        let rest = &line[line.find(key)? + key.len()..];
        let end = rest.find('"')?;
        Some(rest[..end].replace("\\\\", "\\"))
    };
    stdout
        .lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\""))
        .filter_map(|l| {
            let target = &l[l.find("\"target\":{")?..];
            let name = string_after(target, "\"name\":\"")?;
            let path = string_after(l, "\"executable\":\"")?;
            Some((name, PathBuf::from(path)))
        })
        .collect()
}

/// What the suite's binaries printed: their rows and the `LOAD\t<loadavg>` lines.
#[derive(Default)]
struct Output {
    rows: Vec<Row>,
    loads: Vec<String>,
}

impl Output {
    /// One line of a binary's stdout; the others go to stderr as progress.
    fn line(&mut self, line: &str) -> Result<(), String> {
        if line.starts_with("ROW\t") {
            let row = Row::parse(line)?;
            let text = render_text(std::slice::from_ref(&row));
            eprintln!("{}", text.lines().nth(1).unwrap_or(""));
            self.rows.push(row);
        } else if let Some(l) = line.strip_prefix("LOAD\t") {
            self.loads.push(l.to_owned());
        } else {
            eprintln!("{line}");
        }
        Ok(())
    }
}

/// Runs one suite binary, collecting what it prints.
fn rows_of(cmd: &mut Command, out: &mut Output) -> Result<(), String> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    for line in BufReader::new(child.stdout.take().expect("stdout")).lines() {
        out.line(&line.map_err(|e| e.to_string())?)?;
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("{cmd:?} failed: {status}"));
    }
    Ok(())
}

/// `--rows FILE`: the table and the document from a saved stdout of the suite's binaries (one
/// run, e.g. `cargo bench -p execseam-reliability --bench suite > FILE`).
fn from_file(file: &str, quick: bool, merged: bool) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
    let mut out = Output::default();
    for l in text.lines() {
        out.line(l)?;
    }
    let rows = table_order(out.rows);
    println!("{}", render_text(&rows));
    let meta = Meta {
        quick,
        load_before: out
            .loads
            .first()
            .cloned()
            .unwrap_or_else(|| "unknown".into()),
        load_after: out
            .loads
            .last()
            .cloned()
            .unwrap_or_else(|| "unknown".into()),
        build_secs: f64::NAN,
        prepare_secs: f64::NAN,
        total_secs: f64::NAN,
        commit: git_head(&root()),
    };
    if merged {
        let path = root().join("docs/performance.md");
        let old = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::write(&path, merge(&old, &rows, &meta)?)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        println!("merged into {}", path.display());
        return Ok(());
    }
    write_doc(&rows, &meta)
}

fn write_doc(rows: &[Row], meta: &Meta) -> Result<(), String> {
    let root = root();
    let path = if meta.quick {
        root.join("target/bench-quick.md")
    } else {
        root.join("docs/performance.md")
    };
    std::fs::write(&path, document(rows, meta)).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

pub fn run(args: &[String]) -> Result<(), String> {
    let mut quick = false;
    let mut pairs: Option<String> = None;
    let mut rows_file = None;
    let mut merged = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--pairs" => {
                let n = it.next().ok_or("--pairs needs a number")?;
                n.parse::<usize>()
                    .map_err(|_| format!("--pairs {n:?}: not a number"))?;
                pairs = Some(n.clone());
            }
            "--rows" => rows_file = Some(it.next().ok_or("--rows needs a file")?),
            "--merge" => merged = true,
            "--target" => {
                let name = it.next().ok_or("--target needs a bench target's name")?;
                let (package, bench) = BENCHES
                    .iter()
                    .find(|(_, b)| b == name)
                    .ok_or_else(|| format!("no bench target {name:?}"))?;
                return run_cmd(cargo().args(["bench", "-p", package, "--bench", bench]));
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if let Some(file) = rows_file {
        return from_file(file, quick, merged);
    }
    if merged {
        return Err("--merge goes with --rows FILE".into());
    }
    let root = root();
    let load_before = loadavg();
    let started = Instant::now();
    // The release build, timed: the suite, the serve load bench and the CLI (P3's start-up), in
    // ONE cargo invocation, so their dependencies are built once with one feature set (built
    // apart, the CLI's own feature set rebuilt tokio, hyper and every adapter: 322 s of 722).
    // What the run needs besides the build (SDK virtualenvs, P4's tree, podman, PostgreSQL,
    // hyperfine) is made at the same time: it mostly waits on registries and the disk.
    let tree = if quick { (100, 500) } else { (1000, 1000) };
    let preparing = std::thread::spawn(move || {
        let t = Instant::now();
        (bench_setup::prepare(tree), t.elapsed().as_secs_f64())
    });
    let build = Instant::now();
    let out = cargo()
        .args([
            "build",
            "--profile",
            "bench",
            "--message-format",
            "json-render-diagnostics",
            "-p",
            "execseam-reliability",
            "--bench",
            "suite",
            "-p",
            "execseam-server",
            "--bench",
            "load",
            "-p",
            "execseam-cli",
            "--bin",
            "execseam",
        ])
        .current_dir(&root)
        .stdout(Stdio::piped())
        .output()
        .map_err(|e| format!("cargo: {e}"))?;
    let build_secs = build.elapsed().as_secs_f64();
    let (mut prepared, prepare_secs) = preparing.join().map_err(|_| "the preparation panicked")?;
    for line in &prepared.log {
        eprintln!("xtask: prepared {line}");
    }
    if !out.status.success() {
        return Err("the suite's build failed".into());
    }
    let exes = executables(&String::from_utf8_lossy(&out.stdout));
    let exe = |name: &str| {
        exes.iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| root.join(p))
            .ok_or_else(|| format!("cargo reported no executable for bench {name:?}"))
    };
    let cli = exe("execseam")?;
    let mut out = Output::default();
    let mut suite = Command::new(exe("suite")?);
    suite
        .arg("--bench")
        .current_dir(&root)
        .envs(prepared.env.iter().cloned())
        .env("EXECSEAM_BENCH_CLI", &cli);
    if quick {
        suite.env("EXECSEAM_BENCH_QUICK", "1");
    }
    if let Some(n) = &pairs {
        suite.env("EXECSEAM_BENCH_PAIRS", n);
    }
    rows_of(&mut suite, &mut out)?;
    let mut load = Command::new(exe("load")?);
    load.arg("--bench")
        .current_dir(&root)
        .envs(prepared.env.iter().cloned())
        .env("EXECSEAM_BENCH_ROWS", "1");
    if quick {
        load.env("EXECSEAM_BENCH_QUICK", "1");
    }
    rows_of(&mut load, &mut out)?;
    prepared.stop();
    let rows = table_order(out.rows);
    let total = started.elapsed().as_secs_f64();
    let load_after = loadavg();
    println!("{}", render_text(&rows));
    println!(
        "build {build_secs:.0} s (the preparation beside it {prepare_secs:.0} s), whole run {total:.0} s, load average {load_before} -> {load_after}"
    );
    write_doc(
        &rows,
        &Meta {
            quick,
            load_before,
            load_after,
            build_secs,
            prepare_secs,
            total_secs: total,
            commit: git_head(&root),
        },
    )
}

fn git_head(root: &Path) -> String {
    Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".into())
}

pub struct Meta {
    pub quick: bool,
    pub load_before: String,
    pub load_after: String,
    pub build_secs: f64,
    /// The preparation (`bench_setup`), which runs beside the build.
    pub prepare_secs: f64,
    pub total_secs: f64,
    pub commit: String,
}

/// The generated part of `docs/performance.md`, between the markers; the hand-written part of an
/// existing file (explanations) is kept.
pub fn document(rows: &[Row], meta: &Meta) -> String {
    let path = root().join("docs/performance.md");
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let generated = generated(rows, meta);
    match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if b < e && !meta.quick => format!(
            "{}{BEGIN}\n{generated}{END}{}",
            &old[..b],
            &old[e + END.len()..]
        ),
        _ => format!("# Performance\n\n{BEGIN}\n{generated}{END}\n"),
    }
}

fn generated(rows: &[Row], meta: &Meta) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "Generated by `cargo xtask bench{}` at commit `{}`. Times in milliseconds; every ratio is A/B \
         of one run, A and B alternating against the same emulator process (lower is better).\n\n",
        if meta.quick { " --quick" } else { "" },
        meta.commit
    ));
    s.push_str(&format!(
        "Machine: {} cores; load average (1, 5, 15 min) {} at the start, {} at the end.",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        meta.load_before,
        meta.load_after,
    ));
    if meta.build_secs.is_finite() {
        s.push_str(&format!(
            " Release build (profile `bench`) {:.0} s (beside it, the preparation of SDKs, services and P4's tree {:.0} s), whole run {:.0} s.",
            meta.build_secs, meta.prepare_secs, meta.total_secs
        ));
    }
    s.push_str("\n\n");
    s.push_str(&render_markdown(rows));
    let above = above_target(rows);
    if !above.is_empty() {
        s.push_str("\nAbove target in this run: ");
        s.push_str(
            &above
                .iter()
                .map(|r| format!("{} {}", r.section, r.name))
                .collect::<Vec<_>>()
                .join("; "),
        );
        s.push_str(" (see the explanations below).\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bench_target_is_listed() {
        let root = root().join("crates");
        let mut found = Vec::new();
        for krate in std::fs::read_dir(&root).unwrap().flatten() {
            let Ok(benches) = std::fs::read_dir(krate.path().join("benches")) else {
                continue;
            };
            for b in benches.flatten() {
                if b.path().extension().is_some_and(|e| e == "rs") {
                    found.push(
                        b.file_name()
                            .to_string_lossy()
                            .trim_end_matches(".rs")
                            .to_owned(),
                    );
                }
            }
        }
        found.sort();
        let mut listed: Vec<String> = BENCHES.iter().map(|(_, b)| (*b).to_owned()).collect();
        listed.sort();
        assert_eq!(found, listed, "xtask bench must list every benchmark");
    }

    fn row(line: &str) -> Row {
        Row::parse(line).unwrap()
    }

    #[test]
    fn rows_parse_and_judge_their_ratio() {
        let r = row(
            "ROW\tP1\te2b exec\tadapter\t2.00\t3.00\traw\t1.00\t2.00\t200\t1.05\tround trips 1/1",
        );
        assert_eq!(r.ratio(), Some(2.0));
        assert_eq!(r.ratio_p90(), Some(1.5));
        assert_eq!(r.verdict(), "ABOVE");
        let ok = row("ROW\tP1\tx\ta\t1.00\t-\tb\t1.00\t-\t200\t1.05\t");
        assert_eq!((ok.verdict(), ok.ratio_p90()), ("ok", None));
        let alone = row("ROW\tP5\tserve\ta\t1.5\t-\t-\t-\t-\t1000\t-\tlost 0");
        assert_eq!((alone.ratio(), alone.verdict()), (None, ""));
        assert!(Row::parse("ROW\tP1\ttoo few").is_err());
        assert!(Row::parse("ROW\tP1\tx\ta\tfast\t-\tb\t1\t-\t2\t-\t").is_err());
        assert!(Row::parse("progress").is_err());
    }

    #[test]
    fn late_rows_join_their_group() {
        let names = |rows: Vec<Row>| -> Vec<String> {
            table_order(rows)
                .iter()
                .map(|r| format!("{} {}", r.section, r.name))
                .collect()
        };
        let rows = [
            "P1\ta: exec",
            "P2\ta: latency, loopback",
            "P5\ta: burst",
            "P1\tb: exec",
            "P2\tb: latency, loopback",
            "P3\tlocal",
            "P2\ta: latency, +25 ms",
            "P2\tb: latency, +25 ms",
            "P5\tserve load",
        ]
        .map(|r| row(&format!("ROW\t{r}\ta\t1\t-\tb\t1\t-\t1\t-\t")));
        assert_eq!(
            names(rows.to_vec()),
            [
                "P1 a: exec",
                "P2 a: latency, loopback",
                "P2 a: latency, +25 ms",
                "P5 a: burst",
                "P1 b: exec",
                "P2 b: latency, loopback",
                "P2 b: latency, +25 ms",
                "P3 local",
                "P5 serve load",
            ]
        );
    }

    #[test]
    fn the_text_table_is_aligned_and_the_markdown_escaped() {
        let rows = [
            row("ROW\tP1\te2b\tadapter\t2.00\t3.00\traw\t1.00\t2.00\t200\t1.05\ta|b"),
            row(
                "ROW\tP3\tcli start-up\texecseam --version\t1.50\t1.70\t/bin/true\t0.50\t0.60\t200\t-\t",
            ),
        ];
        let text = render_text(&rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        let col = |l: &str| {
            l.find("A p50")
                .or_else(|| l.find("2.00"))
                .or_else(|| l.find("1.50"))
        };
        assert_eq!(col(lines[0]), col(lines[1]));
        assert_eq!(col(lines[1]), col(lines[2]));
        assert!(lines[1].contains("<= 1.05 ABOVE"), "{text}");
        let md = render_markdown(&rows);
        assert!(md.starts_with("| row | A | A p50 |"), "{md}");
        assert!(md.contains("a\\|b"), "{md}");
        assert_eq!(md.lines().count(), 4);
        assert!(
            md.lines().all(|l| l.starts_with('|') && l.ends_with('|')),
            "{md}"
        );
        assert!(md.contains("| 1.50 | 1.70 | /bin/true | 0.50 |"), "{md}");
    }

    #[test]
    fn the_document_names_the_load_and_rows_above_target() {
        let rows = [row(
            "ROW\tP1\te2b\tadapter\t2.00\t3.00\traw\t1.00\t2.00\t200\t1.05\t",
        )];
        let meta = Meta {
            quick: true,
            load_before: "6.01 5.00 4.00".into(),
            load_after: "7.00 6.00 5.00".into(),
            build_secs: 300.0,
            prepare_secs: 200.0,
            total_secs: 600.0,
            commit: "abc1234".into(),
        };
        let doc = document(&rows, &meta);
        assert!(
            doc.contains("load average (1, 5, 15 min) 6.01 5.00 4.00"),
            "{doc}"
        );
        assert!(doc.contains("Above target in this run: P1 e2b"), "{doc}");
        assert!(doc.contains("`cargo xtask bench --quick`"), "{doc}");
    }

    #[test]
    fn a_merge_replaces_only_the_groups_it_brings() {
        let meta = |commit: &str| Meta {
            quick: false,
            load_before: "1".into(),
            load_after: "2".into(),
            build_secs: f64::NAN,
            prepare_secs: f64::NAN,
            total_secs: f64::NAN,
            commit: commit.into(),
        };
        let old_rows = [
            row("ROW\tP1\te2b: exec\tadapter\t2.004\t3.00\traw\t1.00\t2.00\t200\t1.05\tx"),
            row("ROW\tP1\tk8s: exec\tadapter\t9.00\t9.00\traw\t1.00\t1.00\t200\t1.05\told"),
            row("ROW\tP5\te2b: 512\tp99\t5.00\t5.00\tp50\t1.00\t1.00\t512\t5\ty"),
        ];
        let old = format!(
            "# Performance\n\nintro\n\n{}\n## After\n",
            document_block(&old_rows, &meta("aaa"))
        );
        let e2b_p1 = old
            .lines()
            .find(|l| l.starts_with("| P1 e2b"))
            .unwrap()
            .to_owned();
        let new = [
            row("ROW\tP1\tk8s: exec\tadapter\t1.00\t1.00\traw\t1.00\t1.00\t200\t1.05\tnew"),
            row("ROW\tP5\tk8s: 512\tp99\t2.00\t2.00\tp50\t1.00\t1.00\t512\t5\tz"),
        ];
        let merged = merge(&old, &new, &meta("bbb")).unwrap();
        let rows: Vec<&str> = merged.lines().filter(|l| l.starts_with("| P")).collect();
        assert_eq!(rows.len(), 4, "{merged}");
        assert_eq!(rows[0], e2b_p1, "a kept row is its old line");
        assert!(rows[1].starts_with("| P1 k8s") && rows[1].ends_with("| new |"));
        assert!(
            rows[3].starts_with("| P5 k8s"),
            "a new group after the last row"
        );
        assert!(merged.contains("Rows of P1 k8s, P5 k8s from a later run"));
        assert!(merged.contains("Above target in this run: P1 e2b: exec (see"));
        assert!(
            !merged.contains("P1 k8s: exec (see"),
            "no longer above target"
        );
        assert!(merged.starts_with("# Performance\n\nintro\n") && merged.ends_with("## After\n"));
        assert!(merge("# Performance\n", &new, &meta("c")).is_err());
    }

    /// The generated block of a document with `rows`, markers included.
    fn document_block(rows: &[Row], meta: &Meta) -> String {
        format!("{BEGIN}\n{}{END}", generated(rows, meta))
    }

    #[test]
    fn cargo_reports_executables() {
        // Lines as cargo 1.9x writes them (shortened): a library (no executable), a bench, a bin.
        let e = executables(concat!(
            r#"{"reason":"compiler-artifact","package_id":"x","manifest_path":"/r/Cargo.toml","target":{"kind":["lib"],"crate_types":["lib"],"name":"core","src_path":"/r/src/lib.rs"},"profile":{},"features":[],"filenames":["/r/t/libcore.rlib"],"executable":null,"fresh":false}"#,
            "\n",
            r#"{"reason":"compiler-artifact","package_id":"x","manifest_path":"/r/Cargo.toml","target":{"kind":["bench"],"crate_types":["bin"],"name":"suite","src_path":"/r/benches/suite.rs"},"profile":{},"features":[],"filenames":["/r/target/release/deps/suite-0123"],"executable":"/r/target/release/deps/suite-0123","fresh":false}"#,
            "\n",
            r#"{"reason":"compiler-message","message":{"rendered":"warning: \"executable\":\"x\""}}"#,
            "\n",
            r#"{"reason":"compiler-artifact","package_id":"x","manifest_path":"/r/Cargo.toml","target":{"kind":["bin"],"crate_types":["bin"],"name":"execseam","src_path":"/r/src/main.rs"},"profile":{},"features":[],"filenames":["/r/target/release/execseam"],"executable":"/r/target/release/execseam","fresh":true}"#,
            "\n",
            r#"{"reason":"build-finished","success":true}"#,
        ));
        assert_eq!(
            e,
            [
                (
                    "suite".to_owned(),
                    PathBuf::from("/r/target/release/deps/suite-0123")
                ),
                (
                    "execseam".to_owned(),
                    PathBuf::from("/r/target/release/execseam")
                ),
            ]
        );
    }
}
