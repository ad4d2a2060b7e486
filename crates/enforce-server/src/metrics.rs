//! A small Prometheus registry: labelled counters, gauges and histograms rendered in the text
//! exposition format. Hand-rolled because the proxy needs a dozen series, not a metrics
//! framework. The metrics the server itself exports are declared once here, as [`Metric`]s.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

/// Upper bounds (seconds) of the latency histograms: from 100 µs (proxy overhead) to 5 min
/// (a slow model with re-asks).
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// A label set, kept sorted by name so equal sets render identically.
type Labels = Vec<(&'static str, String)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A metric the server exports, declared once below: the name dashboards and alerts know it
/// by, the `# HELP` text `/metrics` renders for it, and its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Metric {
    pub name: &'static str,
    pub help: &'static str,
    kind: Kind,
}

const fn counter(name: &'static str, help: &'static str) -> Metric {
    Metric {
        name,
        help,
        kind: Kind::Counter,
    }
}

const fn gauge(name: &'static str, help: &'static str) -> Metric {
    Metric {
        name,
        help,
        kind: Kind::Gauge,
    }
}

const fn histogram(name: &'static str, help: &'static str) -> Metric {
    Metric {
        name,
        help,
        kind: Kind::Histogram,
    }
}

// The server's own metrics; every call site names one of these. The binary sets
// `enforce_breaker_state` itself through the public `set_gauge`.
/// The `status` of a request whose client went away before its answer was sent (in
/// [`REQUESTS`] and the request span's `enforce.status`).
pub(crate) const CLIENT_DISCONNECTED: &str = "client_disconnected";

pub(crate) const REQUESTS: Metric = counter(
    "enforce_requests_total",
    "Chat completion requests by model and final status.",
);
pub(crate) const REQUEST_DURATION: Metric = histogram(
    "enforce_request_duration_seconds",
    "Wall time of chat completion requests.",
);
pub(crate) const ATTEMPTS: Metric = counter(
    "enforce_attempts_total",
    "Runner attempts (first asks and re-asks).",
);
pub(crate) const UPSTREAM_LATENCY: Metric = histogram(
    "enforce_upstream_latency_seconds",
    "Time waiting on the runner, per attempt.",
);
pub(crate) const ISSUES: Metric = counter(
    "enforce_issues_total",
    "Issues found, by validator and code, over all attempts.",
);
pub(crate) const REPAIRS: Metric = counter(
    "enforce_repairs_total",
    "Repairs that changed a response, by validator.",
);
pub(crate) const RUNNER_FAILURES: Metric = counter(
    "enforce_runner_failures_total",
    "Attempts whose runner failed (upstream error, timeout, cut stream).",
);
pub(crate) const OVERHEAD: Metric = histogram(
    "enforce_overhead_seconds",
    "Enforcement time not spent waiting on the runner (validation, repairs, bookkeeping).",
);
pub(crate) const IN_FLIGHT: Metric = gauge("enforce_in_flight", "Enforcements running now.");
pub(crate) const REJECTED: Metric = counter(
    "enforce_rejected_total",
    "Requests refused before any enforcement, by reason.",
);
pub(crate) const AUDIT_WRITE_FAILURES: Metric = counter(
    "enforce_audit_write_failures_total",
    "Audit lines that could not be written or synced (disk full, read-only file system).",
);
pub(crate) const STATE_DEGRADED: Metric = gauge(
    "enforce_state_degraded",
    "1 while the shared state (Redis) failed and this replica runs on its local state, until its local changes are written back.",
);
pub(crate) const STATE_FALLBACKS: Metric = counter(
    "enforce_state_fallbacks_total",
    "Shared-state (Redis) operations that failed or timed out and fell back to local state, by operation.",
);

pub(crate) const INPUT_CHECKS: Metric = counter(
    "enforce_input_checks_total",
    "Requests checked before the model call (profiles with input validators), by what the input stage did.",
);
pub(crate) const FALLBACKS: Metric = counter(
    "enforce_fallbacks_total",
    "Answers that failed every attempt and met the profile's fallback, by model, profile and outcome (applied: the fallback text was sent; rejected: it failed its own validators and the last answer went out instead).",
);
pub(crate) const CACHE_LOOKUPS: Metric = counter(
    "enforce_cache_lookups_total",
    "Answer-cache lookups of models with `cache:`, by model and result (hit, miss, bypass: the request sent Cache-Control: no-cache).",
);
pub(crate) const CACHE_TOKENS_SAVED: Metric = counter(
    "enforce_cache_tokens_saved_total",
    "Tokens the answers replayed from the answer cache cost when they were made, by model.",
);
pub(crate) const ROUTES: Metric = counter(
    "enforce_routes_total",
    "Requests of models with routes, by the route taken, its profile and what matched.",
);

/// A counter's or gauge's value (the bits of an `f64`), shared by the registry that renders
/// it and the handles that update it without the registry's lock.
#[derive(Debug, Default)]
struct Cell(AtomicU64);

impl Cell {
    fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }

    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }

    fn add(&self, by: f64) {
        // `fetch_update` retries until no other update came in between: never fails.
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + by).to_bits())
            });
    }
}

/// The number of latency buckets.
const BUCKETS: usize = LATENCY_BUCKETS.len();

/// A latency histogram. Each observation counts in the one bucket it falls in (the render
/// makes them cumulative), so recording one is three atomic additions.
#[derive(Debug)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    count: AtomicU64,
    sum: Cell,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum: Cell::default(),
        }
    }
}

impl Histogram {
    fn observe(&self, seconds: f64) {
        // The first bucket whose bound holds it; none (only `+Inf`) past the last, or for NaN.
        let bucket = if seconds.is_nan() {
            BUCKETS
        } else {
            LATENCY_BUCKETS.partition_point(|bound| *bound < seconds)
        };
        if let Some(slot) = self.buckets.get(bucket) {
            slot.fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum.add(seconds);
    }
}

#[derive(Debug)]
struct Family {
    help: &'static str,
    kind: Kind,
    values: BTreeMap<Labels, Arc<Cell>>,
    histograms: BTreeMap<Labels, Arc<Histogram>>,
}

/// The registry. Every method takes `&self`; share it in an `Arc`.
#[derive(Debug, Default)]
pub struct Metrics {
    families: Mutex<BTreeMap<&'static str, Family>>,
}

/// One counter series, updated without the registry's lock (see [`Metrics::counter`]).
#[derive(Debug, Clone)]
pub(crate) struct Counter(Arc<Cell>);

impl Counter {
    /// Adds `by`.
    pub fn add(&self, by: u64) {
        self.0.add(by as f64);
    }
}

/// One gauge series, updated without the registry's lock (see [`Metrics::gauge`]).
#[derive(Debug, Clone)]
pub(crate) struct Gauge(Arc<Cell>);

impl Gauge {
    /// Adds `delta`.
    pub fn shift(&self, delta: f64) {
        self.0.add(delta);
    }
}

/// One histogram series, updated without the registry's lock (see [`Metrics::histogram`]).
#[derive(Debug, Clone)]
pub(crate) struct LatencyHistogram(Arc<Histogram>);

impl LatencyHistogram {
    /// Records `seconds`.
    pub fn observe(&self, seconds: f64) {
        self.0.observe(seconds);
    }
}

/// The series every request of one model updates: each made on its first use, then updated
/// without the registry's lock or a label set built per request.
#[derive(Debug)]
pub(crate) struct ModelSeries {
    metrics: Arc<Metrics>,
    model: String,
    duration: OnceLock<LatencyHistogram>,
    upstream: OnceLock<LatencyHistogram>,
    overhead: OnceLock<LatencyHistogram>,
    attempts: OnceLock<Counter>,
    /// `enforce_requests_total` by status, in the order the statuses first came.
    requests: Mutex<Vec<(String, Counter)>>,
}

impl ModelSeries {
    /// The series of `model` in `metrics`, none made yet.
    pub fn new(metrics: Arc<Metrics>, model: &str) -> Self {
        ModelSeries {
            metrics,
            model: model.to_string(),
            duration: OnceLock::new(),
            upstream: OnceLock::new(),
            overhead: OnceLock::new(),
            attempts: OnceLock::new(),
            requests: Mutex::new(Vec::new()),
        }
    }

    fn histogram<'a>(
        &'a self,
        cell: &'a OnceLock<LatencyHistogram>,
        metric: &Metric,
    ) -> &'a LatencyHistogram {
        cell.get_or_init(|| self.metrics.histogram(metric, &[("model", &self.model)]))
    }

    /// `enforce_request_duration_seconds`.
    pub fn duration(&self) -> &LatencyHistogram {
        self.histogram(&self.duration, &REQUEST_DURATION)
    }

    /// `enforce_upstream_latency_seconds`.
    pub fn upstream_latency(&self) -> &LatencyHistogram {
        self.histogram(&self.upstream, &UPSTREAM_LATENCY)
    }

    /// `enforce_overhead_seconds`.
    pub fn overhead(&self) -> &LatencyHistogram {
        self.histogram(&self.overhead, &OVERHEAD)
    }

    /// `enforce_attempts_total`.
    pub fn attempts(&self) -> &Counter {
        self.attempts
            .get_or_init(|| self.metrics.counter(&ATTEMPTS, &[("model", &self.model)]))
    }

    /// Counts a finished request in `enforce_requests_total` by its `status`.
    pub fn count_request(&self, status: &str) {
        let mut requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, counter)) = requests.iter().find(|(s, _)| s == status) {
            counter.add(1);
            return;
        }
        let counter = self
            .metrics
            .counter(&REQUESTS, &[("model", &self.model), ("status", status)]);
        counter.add(1);
        requests.push((status.to_string(), counter));
    }
}

fn sorted(labels: &[(&'static str, &str)]) -> Labels {
    let mut out: Labels = labels.iter().map(|(k, v)| (*k, (*v).to_string())).collect();
    out.sort();
    out
}

fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn render_labels(labels: &Labels, extra: Option<(&str, String)>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    if let Some((k, v)) = extra {
        parts.push(format!("{k}=\"{v}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

fn format_number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

impl Metrics {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<&'static str, Family>> {
        // Plain numbers behind the lock: a panic elsewhere cannot leave them inconsistent.
        self.families.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn family<'a>(
        families: &'a mut BTreeMap<&'static str, Family>,
        name: &'static str,
        help: &'static str,
        kind: Kind,
    ) -> &'a mut Family {
        families.entry(name).or_insert_with(|| Family {
            help,
            kind,
            values: BTreeMap::new(),
            histograms: BTreeMap::new(),
        })
    }

    /// The value of a counter or gauge series, made at zero when new.
    fn cell(
        &self,
        name: &'static str,
        help: &'static str,
        kind: Kind,
        labels: &[(&'static str, &str)],
    ) -> Arc<Cell> {
        let mut families = self.lock();
        let family = Self::family(&mut families, name, help, kind);
        family.values.entry(sorted(labels)).or_default().clone()
    }

    /// A histogram series, made empty when new.
    fn histogram_of(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
    ) -> Arc<Histogram> {
        let mut families = self.lock();
        let family = Self::family(&mut families, name, help, Kind::Histogram);
        family.histograms.entry(sorted(labels)).or_default().clone()
    }

    /// Adds `by` to a counter.
    pub fn add(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        by: u64,
    ) {
        self.cell(name, help, Kind::Counter, labels).add(by as f64);
    }

    /// Adds `delta` to a gauge.
    pub fn gauge_add(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        delta: f64,
    ) {
        self.cell(name, help, Kind::Gauge, labels).add(delta);
    }

    /// Sets a gauge to `value`.
    pub fn set_gauge(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        value: f64,
    ) {
        self.cell(name, help, Kind::Gauge, labels).set(value);
    }

    /// Records `seconds` in a latency histogram.
    pub fn observe(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        seconds: f64,
    ) {
        self.histogram_of(name, help, labels).observe(seconds);
    }

    /// The series of the declared counter `metric` with `labels`, to update without looking
    /// it up again (a request's own series, updated on every request). The series renders
    /// from the moment it is made, at zero.
    pub(crate) fn counter(&self, metric: &Metric, labels: &[(&'static str, &str)]) -> Counter {
        debug_assert_eq!(metric.kind, Kind::Counter, "{}", metric.name);
        Counter(self.cell(metric.name, metric.help, Kind::Counter, labels))
    }

    /// The series of the declared gauge `metric` with `labels` (see [`Metrics::counter`]).
    pub(crate) fn gauge(&self, metric: &Metric, labels: &[(&'static str, &str)]) -> Gauge {
        debug_assert_eq!(metric.kind, Kind::Gauge, "{}", metric.name);
        Gauge(self.cell(metric.name, metric.help, Kind::Gauge, labels))
    }

    /// The series of the declared histogram `metric` with `labels` (see [`Metrics::counter`]).
    pub(crate) fn histogram(
        &self,
        metric: &Metric,
        labels: &[(&'static str, &str)],
    ) -> LatencyHistogram {
        debug_assert_eq!(metric.kind, Kind::Histogram, "{}", metric.name);
        LatencyHistogram(self.histogram_of(metric.name, metric.help, labels))
    }

    /// Adds `by` to the declared counter `metric`.
    pub(crate) fn count(&self, metric: &Metric, labels: &[(&'static str, &str)], by: u64) {
        debug_assert_eq!(metric.kind, Kind::Counter, "{}", metric.name);
        self.add(metric.name, metric.help, labels, by);
    }

    /// Sets the declared gauge `metric` to `value`.
    pub(crate) fn set_declared_gauge(
        &self,
        metric: &Metric,
        labels: &[(&'static str, &str)],
        value: f64,
    ) {
        debug_assert_eq!(metric.kind, Kind::Gauge, "{}", metric.name);
        self.set_gauge(metric.name, metric.help, labels, value);
    }

    /// The current value of a counter or gauge (0 when never touched). For tests and checks.
    pub fn value(&self, name: &str, labels: &[(&'static str, &str)]) -> f64 {
        let families = self.lock();
        families
            .get(name)
            .and_then(|f| f.values.get(&sorted(labels)).map(|cell| cell.get()))
            .unwrap_or(0.0)
    }

    /// Everything in the Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let families = self.lock();
        let mut out = String::new();
        for (name, family) in families.iter() {
            let _ = writeln!(out, "# HELP {name} {}", family.help);
            let _ = writeln!(out, "# TYPE {name} {}", family.kind.as_str());
            for (labels, value) in &family.values {
                let _ = writeln!(
                    out,
                    "{name}{} {}",
                    render_labels(labels, None),
                    format_number(value.get())
                );
            }
            for (labels, h) in &family.histograms {
                let mut below = 0;
                for (count, bound) in h.buckets.iter().zip(LATENCY_BUCKETS) {
                    below += count.load(Ordering::Relaxed);
                    let _ = writeln!(
                        out,
                        "{name}_bucket{} {below}",
                        render_labels(labels, Some(("le", format!("{bound}"))))
                    );
                }
                let count = h.count.load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "{name}_bucket{} {}",
                    render_labels(labels, Some(("le", "+Inf".to_string()))),
                    count
                );
                let sum = h.sum.get();
                let _ = writeln!(out, "{name}_sum{} {sum}", render_labels(labels, None));
                let _ = writeln!(out, "{name}_count{} {count}", render_labels(labels, None));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_with_escaped_labels() {
        let m = Metrics::new();
        m.add("x_total", "X.", &[("model", "a\"b"), ("status", "ok")], 2);
        m.add("x_total", "X.", &[("status", "ok"), ("model", "a\"b")], 1);
        let text = m.render();
        assert!(text.contains("# TYPE x_total counter"));
        assert!(
            text.contains("x_total{model=\"a\\\"b\",status=\"ok\"} 3"),
            "{text}"
        );
        assert_eq!(
            m.value("x_total", &[("status", "ok"), ("model", "a\"b")]),
            3.0
        );
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::new();
        m.observe("lat_seconds", "L.", &[], 0.0003);
        m.observe("lat_seconds", "L.", &[], 2.0);
        let text = m.render();
        assert!(
            text.contains("lat_seconds_bucket{le=\"0.0005\"} 1"),
            "{text}"
        );
        assert!(text.contains("lat_seconds_bucket{le=\"2.5\"} 2"));
        assert!(text.contains("lat_seconds_bucket{le=\"+Inf\"} 2"));
        assert!(text.contains("lat_seconds_count 2"));
    }

    #[test]
    fn declared_metrics_are_unique_and_named_by_their_type() {
        let declared = [
            REQUESTS,
            REQUEST_DURATION,
            ATTEMPTS,
            UPSTREAM_LATENCY,
            ISSUES,
            REPAIRS,
            RUNNER_FAILURES,
            OVERHEAD,
            IN_FLIGHT,
            REJECTED,
            AUDIT_WRITE_FAILURES,
            STATE_DEGRADED,
            STATE_FALLBACKS,
            INPUT_CHECKS,
            ROUTES,
            CACHE_LOOKUPS,
            CACHE_TOKENS_SAVED,
        ];
        let mut names = std::collections::BTreeSet::new();
        for metric in declared {
            assert!(names.insert(metric.name), "{} declared twice", metric.name);
            assert!(metric.name.starts_with("enforce_"), "{}", metric.name);
            assert!(metric.help.ends_with('.'), "{}", metric.name);
            let suffix_ok = match metric.kind {
                Kind::Counter => metric.name.ends_with("_total"),
                Kind::Histogram => metric.name.ends_with("_seconds"),
                Kind::Gauge => !metric.name.ends_with("_total"),
            };
            assert!(suffix_ok, "{} is a {}", metric.name, metric.kind.as_str());
        }
    }

    #[test]
    fn a_declared_metric_renders_its_help_and_type() {
        let m = Metrics::new();
        m.count(&REJECTED, &[("reason", "overloaded")], 2);
        m.gauge(&IN_FLIGHT, &[]).shift(1.0);
        m.histogram(&OVERHEAD, &[("model", "m")]).observe(0.001);
        let text = m.render();
        assert!(
            text.contains(
                "# HELP enforce_rejected_total Requests refused before any enforcement, by reason.\n\
                 # TYPE enforce_rejected_total counter\n\
                 enforce_rejected_total{reason=\"overloaded\"} 2\n"
            ),
            "{text}"
        );
        assert!(text.contains("# TYPE enforce_in_flight gauge\nenforce_in_flight 1\n"));
        assert!(text.contains("# TYPE enforce_overhead_seconds histogram\n"));
        assert!(text.contains("enforce_overhead_seconds_count{model=\"m\"} 1\n"));
    }

    /// A model's series are the registry's: made on first use, named by model (and status),
    /// counted across the handles that share them, and absent until used.
    #[test]
    fn a_models_series_update_the_registrys_series() {
        let m = Arc::new(Metrics::new());
        let series = ModelSeries::new(m.clone(), "m");
        assert!(!m.render().contains("enforce_requests_total"));
        series.count_request("passed");
        series.count_request("failed");
        series.count_request("passed");
        m.count(&REQUESTS, &[("status", "passed"), ("model", "m")], 1);
        assert_eq!(
            m.value(REQUESTS.name, &[("model", "m"), ("status", "passed")]),
            3.0
        );
        assert_eq!(
            m.value(REQUESTS.name, &[("model", "m"), ("status", "failed")]),
            1.0
        );
        series.attempts().add(2);
        ModelSeries::new(m.clone(), "m").attempts().add(1);
        assert_eq!(m.value(ATTEMPTS.name, &[("model", "m")]), 3.0);
        let text = m.render();
        assert!(!text.contains("enforce_overhead_seconds"), "{text}");
        for seconds in [0.0001, 0.0003, 0.7, 400.0, f64::NAN] {
            series.duration().observe(seconds);
        }
        series.overhead().observe(0.002);
        let text = m.render();
        for line in [
            "enforce_request_duration_seconds_bucket{model=\"m\",le=\"0.0001\"} 1\n",
            "enforce_request_duration_seconds_bucket{model=\"m\",le=\"0.0005\"} 2\n",
            "enforce_request_duration_seconds_bucket{model=\"m\",le=\"1\"} 3\n",
            "enforce_request_duration_seconds_bucket{model=\"m\",le=\"300\"} 3\n",
            "enforce_request_duration_seconds_bucket{model=\"m\",le=\"+Inf\"} 5\n",
            "enforce_request_duration_seconds_count{model=\"m\"} 5\n",
            "enforce_overhead_seconds_count{model=\"m\"} 1\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(!text.contains("enforce_upstream_latency_seconds"), "{text}");
    }
}
