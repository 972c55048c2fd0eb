//! `GET /metrics`: Prometheus text exposition, written by hand (no client library): operations
//! by status (from the store, so every replica reports the same totals), a histogram of
//! execution latency, a histogram of store query latency, and request counters by route and
//! status code. No label carries a token, a source, an owner or an operation id.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use execseam_chrono_contract::wire::Status;

/// Bucket bounds in seconds.
const EXEC_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0,
];
const STORE_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// A cumulative histogram.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            if s <= *b {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.sum_micros.fetch_add(
            u64::try_from(d.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{b}\"}} {}",
                c.load(Ordering::Relaxed)
            );
        }
        let n = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {n}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}");
        let _ = writeln!(out, "{name}_count {n}");
    }
}

/// The server's metrics.
#[derive(Debug)]
pub struct Metrics {
    /// Wall time of each command run through the adapter (sync and async).
    pub exec_latency: Histogram,
    /// Wall time of each store query.
    pub store_latency: Histogram,
    /// Commands started by this replica.
    pub executions: AtomicU64,
    /// Operations this replica reconciled after their owner's lease expired.
    pub reconciled: AtomicU64,
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            exec_latency: Histogram::new(EXEC_BUCKETS),
            store_latency: Histogram::new(STORE_BUCKETS),
            executions: AtomicU64::new(0),
            reconciled: AtomicU64::new(0),
            requests: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Metrics {
    /// Counts one answered request.
    pub fn request(&self, route: &'static str, status: u16) {
        let mut m = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((route, status)).or_default() += 1;
    }

    /// The exposition, with `ops` (status, count) from the store.
    pub fn render(&self, ops: &[(String, i64)], store_up: bool) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP execseam_operations Operations in the store by status (all replicas).\n",
        );
        out.push_str("# TYPE execseam_operations gauge\n");
        for s in Status::ALL.map(|s| s.as_str()) {
            let n = ops.iter().find(|(k, _)| k == s).map_or(0, |(_, n)| *n);
            let _ = writeln!(out, "execseam_operations{{status=\"{s}\"}} {n}");
        }
        out.push_str(
            "# HELP execseam_store_up 1 if the last store query of this scrape succeeded.\n",
        );
        out.push_str("# TYPE execseam_store_up gauge\n");
        let _ = writeln!(out, "execseam_store_up {}", u8::from(store_up));
        self.exec_latency.render(
            &mut out,
            "execseam_exec_duration_seconds",
            "Wall time of commands run through the adapter.",
        );
        self.store_latency.render(
            &mut out,
            "execseam_store_query_duration_seconds",
            "Wall time of store queries.",
        );
        for (name, help, counter) in [
            (
                "execseam_executions_total",
                "Commands started by this replica.",
                &self.executions,
            ),
            (
                "execseam_reconciled_total",
                "Operations this replica reconciled after a lease expired.",
                &self.reconciled,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            let _ = writeln!(out, "{name} {}", counter.load(Ordering::Relaxed));
        }
        out.push_str(
            "# HELP execseam_http_requests_total Requests answered, by route and status code.\n",
        );
        out.push_str("# TYPE execseam_http_requests_total counter\n");
        let m = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        for ((route, status), n) in m.iter() {
            let _ = writeln!(
                out,
                "execseam_http_requests_total{{route=\"{route}\",code=\"{status}\"}} {n}"
            );
        }
        out
    }
}
