//! The server's Prometheus registry: labelled counters, gauges and histograms of
//! `prometheus-client`, made on first use and rendered in the Prometheus text exposition format
//! (version 0.0.4). The metrics the server itself exports are declared once here, as [`Metric`]s.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Upper bounds (seconds) of the latency histograms: from 100 µs (proxy overhead) to 5 min
/// (a slow model with re-asks).
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// The `Content-Type` of what [`Metrics::render`] writes.
pub(crate) const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// A label set, kept sorted by name so equal sets are one series.
type Labels = Vec<(&'static str, String)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
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
pub(crate) const ROUTES: Metric = counter(
    "enforce_routes_total",
    "Requests of models with routes, by the route taken, its profile and what matched.",
);

/// One counter series, updated without the registry's lock (see [`Metrics::counter`]).
pub(crate) type Counter = prometheus_client::metrics::counter::Counter;

/// One gauge series, updated without the registry's lock (see [`Metrics::gauge`]).
pub(crate) type Gauge = prometheus_client::metrics::gauge::Gauge<f64, AtomicU64>;

/// One latency histogram series (see [`Metrics::histogram`]).
pub(crate) type LatencyHistogram = prometheus_client::metrics::histogram::Histogram;

fn latency_histogram() -> LatencyHistogram {
    LatencyHistogram::new(LATENCY_BUCKETS.iter().copied())
}

/// The series of one metric, by label set; a clone shares them.
#[derive(Debug, Clone)]
enum Series {
    Counters(Family<Labels, Counter>),
    Gauges(Family<Labels, Gauge>),
    Histograms(Family<Labels, LatencyHistogram, fn() -> LatencyHistogram>),
}

/// The metrics made so far, by the name they are exported as.
#[derive(Debug, Default)]
struct Registered {
    registry: Registry,
    series: HashMap<&'static str, Series>,
}

/// The registry. Every method takes `&self`; share it in an `Arc`.
#[derive(Debug, Default)]
pub struct Metrics {
    registered: Mutex<Registered>,
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
            counter.inc();
            return;
        }
        let counter = self
            .metrics
            .counter(&REQUESTS, &[("model", &self.model), ("status", status)]);
        counter.inc();
        requests.push((status.to_string(), counter));
    }
}

fn sorted(labels: &[(&'static str, &str)]) -> Labels {
    let mut out: Labels = labels.iter().map(|(k, v)| (*k, (*v).to_string())).collect();
    out.sort();
    out
}

impl Metrics {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Registered> {
        // The registry only grows: a panic elsewhere cannot leave it inconsistent.
        self.registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The series of the metric `name`, registered with `new` on first use. `prometheus-client`
    /// adds a counter's `_total` and the `.` ending the help text itself, so both are taken off
    /// what it is given.
    fn series(&self, name: &'static str, help: &'static str, new: fn() -> Series) -> Series {
        let mut registered = self.lock();
        if let Some(series) = registered.series.get(name) {
            return series.clone();
        }
        let series = new();
        let help = help.strip_suffix('.').unwrap_or(help);
        let registry = &mut registered.registry;
        match series.clone() {
            Series::Counters(family) => {
                registry.register(name.strip_suffix("_total").unwrap_or(name), help, family)
            }
            Series::Gauges(family) => registry.register(name, help, family),
            Series::Histograms(family) => registry.register(name, help, family),
        }
        registered.series.insert(name, series.clone());
        series
    }

    /// The counter `name` (ending in `_total`) with `labels`, made at zero when new; `None`
    /// when `name` is another type's.
    fn counter_of(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
    ) -> Option<Counter> {
        match self.series(name, help, || Series::Counters(Family::default())) {
            Series::Counters(family) => Some(family.get_or_create_owned(&sorted(labels))),
            _ => None,
        }
    }

    /// The gauge `name` with `labels` (see [`Metrics::counter_of`]).
    fn gauge_of(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
    ) -> Option<Gauge> {
        match self.series(name, help, || Series::Gauges(Family::default())) {
            Series::Gauges(family) => Some(family.get_or_create_owned(&sorted(labels))),
            _ => None,
        }
    }

    /// The histogram `name` with `labels` (see [`Metrics::counter_of`]).
    fn histogram_of(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
    ) -> Option<LatencyHistogram> {
        let new =
            || Series::Histograms(Family::new_with_constructor(latency_histogram as fn() -> _));
        match self.series(name, help, new) {
            Series::Histograms(family) => Some(family.get_or_create_owned(&sorted(labels))),
            _ => None,
        }
    }

    /// Adds `by` to a counter (its name ending in `_total`).
    pub fn add(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        by: u64,
    ) {
        if let Some(counter) = self.counter_of(name, help, labels) {
            counter.inc_by(by);
        }
    }

    /// Sets a gauge to `value`.
    pub fn set_gauge(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        value: f64,
    ) {
        if let Some(gauge) = self.gauge_of(name, help, labels) {
            gauge.set(value);
        }
    }

    /// Records `seconds` in a latency histogram.
    pub fn observe(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        seconds: f64,
    ) {
        if let Some(histogram) = self.histogram_of(name, help, labels) {
            histogram.observe(seconds);
        }
    }

    /// The series of the declared counter `metric` with `labels`, to update without looking
    /// it up again (a request's own series, updated on every request). The series renders
    /// from the moment it is made, at zero.
    pub(crate) fn counter(&self, metric: &Metric, labels: &[(&'static str, &str)]) -> Counter {
        debug_assert_eq!(metric.kind, Kind::Counter, "{}", metric.name);
        // A declared metric has one type (see the tests), so the fallback is never taken.
        self.counter_of(metric.name, metric.help, labels)
            .unwrap_or_default()
    }

    /// The series of the declared gauge `metric` with `labels` (see [`Metrics::counter`]).
    pub(crate) fn gauge(&self, metric: &Metric, labels: &[(&'static str, &str)]) -> Gauge {
        debug_assert_eq!(metric.kind, Kind::Gauge, "{}", metric.name);
        self.gauge_of(metric.name, metric.help, labels)
            .unwrap_or_default()
    }

    /// The series of the declared histogram `metric` with `labels` (see [`Metrics::counter`]).
    pub(crate) fn histogram(
        &self,
        metric: &Metric,
        labels: &[(&'static str, &str)],
    ) -> LatencyHistogram {
        debug_assert_eq!(metric.kind, Kind::Histogram, "{}", metric.name);
        self.histogram_of(metric.name, metric.help, labels)
            .unwrap_or_else(latency_histogram)
    }

    /// Adds `by` to the declared counter `metric`.
    pub(crate) fn count(&self, metric: &Metric, labels: &[(&'static str, &str)], by: u64) {
        self.counter(metric, labels).inc_by(by);
    }

    /// Sets the declared gauge `metric` to `value`.
    pub(crate) fn set_declared_gauge(
        &self,
        metric: &Metric,
        labels: &[(&'static str, &str)],
        value: f64,
    ) {
        self.gauge(metric, labels).set(value);
    }

    /// The current value of a counter or gauge (0 when never touched). For tests and checks.
    pub fn value(&self, name: &str, labels: &[(&'static str, &str)]) -> f64 {
        let labels = sorted(labels);
        match self.lock().series.get(name) {
            Some(Series::Counters(family)) => family.get(&labels).map(|c| c.get() as f64),
            Some(Series::Gauges(family)) => family.get(&labels).map(|g| g.get()),
            _ => None,
        }
        .unwrap_or(0.0)
    }

    /// Everything in the Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a `String` cannot fail, nor can encoding classic histograms.
        let _ = prometheus_text::encode(&mut out, &self.lock().registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the one sample line of `series` (name and labels as rendered) in `text`.
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

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
            assert!(suffix_ok, "{} is a {:?}", metric.name, metric.kind);
        }
    }

    #[test]
    fn a_declared_metric_renders_its_help_and_type() {
        let m = Metrics::new();
        m.count(&REJECTED, &[("reason", "overloaded")], 2);
        m.gauge(&IN_FLIGHT, &[]).inc();
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
        assert!(text.contains("# TYPE enforce_in_flight gauge\n"), "{text}");
        assert_eq!(sample(&text, "enforce_in_flight"), Some(1.0), "{text}");
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
        series.attempts().inc_by(2);
        ModelSeries::new(m.clone(), "m").attempts().inc();
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
