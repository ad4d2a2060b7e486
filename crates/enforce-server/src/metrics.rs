//! A small Prometheus registry: labelled counters, gauges and histograms rendered in the text
//! exposition format. Hand-rolled because the proxy needs a dozen series, not a metrics
//! framework. The metrics the server itself exports are declared once here, as [`Metric`]s.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard, PoisonError};

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

#[derive(Debug, Default, Clone)]
struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
}

#[derive(Debug)]
struct Family {
    help: &'static str,
    kind: Kind,
    values: BTreeMap<Labels, f64>,
    histograms: BTreeMap<Labels, Histogram>,
}

/// The registry. Every method takes `&self`; share it in an `Arc`.
#[derive(Debug, Default)]
pub struct Metrics {
    families: Mutex<BTreeMap<&'static str, Family>>,
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

    /// Adds `by` to a counter.
    pub fn add(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        by: u64,
    ) {
        let mut families = self.lock();
        let family = Self::family(&mut families, name, help, Kind::Counter);
        *family.values.entry(sorted(labels)).or_insert(0.0) += by as f64;
    }

    /// Adds `delta` to a gauge.
    pub fn gauge_add(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        delta: f64,
    ) {
        let mut families = self.lock();
        let family = Self::family(&mut families, name, help, Kind::Gauge);
        *family.values.entry(sorted(labels)).or_insert(0.0) += delta;
    }

    /// Sets a gauge to `value`.
    pub fn set_gauge(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        value: f64,
    ) {
        let mut families = self.lock();
        let family = Self::family(&mut families, name, help, Kind::Gauge);
        family.values.insert(sorted(labels), value);
    }

    /// Records `seconds` in a latency histogram.
    pub fn observe(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        seconds: f64,
    ) {
        let mut families = self.lock();
        let family = Self::family(&mut families, name, help, Kind::Histogram);
        let h = family
            .histograms
            .entry(sorted(labels))
            .or_insert_with(|| Histogram {
                buckets: vec![0; LATENCY_BUCKETS.len()],
                ..Histogram::default()
            });
        for (slot, bound) in h.buckets.iter_mut().zip(LATENCY_BUCKETS) {
            if seconds <= *bound {
                *slot += 1;
            }
        }
        h.count += 1;
        h.sum += seconds;
    }

    /// Adds `by` to the declared counter `metric`.
    pub(crate) fn count(&self, metric: &Metric, labels: &[(&'static str, &str)], by: u64) {
        debug_assert_eq!(metric.kind, Kind::Counter, "{}", metric.name);
        self.add(metric.name, metric.help, labels, by);
    }

    /// Adds `delta` to the declared gauge `metric`.
    pub(crate) fn shift_gauge(&self, metric: &Metric, labels: &[(&'static str, &str)], delta: f64) {
        debug_assert_eq!(metric.kind, Kind::Gauge, "{}", metric.name);
        self.gauge_add(metric.name, metric.help, labels, delta);
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

    /// Records `seconds` in the declared histogram `metric`.
    pub(crate) fn observe_seconds(
        &self,
        metric: &Metric,
        labels: &[(&'static str, &str)],
        seconds: f64,
    ) {
        debug_assert_eq!(metric.kind, Kind::Histogram, "{}", metric.name);
        self.observe(metric.name, metric.help, labels, seconds);
    }

    /// The current value of a counter or gauge (0 when never touched). For tests and checks.
    pub fn value(&self, name: &str, labels: &[(&'static str, &str)]) -> f64 {
        let families = self.lock();
        families
            .get(name)
            .and_then(|f| f.values.get(&sorted(labels)).copied())
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
                    format_number(*value)
                );
            }
            for (labels, h) in &family.histograms {
                for (count, bound) in h.buckets.iter().zip(LATENCY_BUCKETS) {
                    let _ = writeln!(
                        out,
                        "{name}_bucket{} {count}",
                        render_labels(labels, Some(("le", format!("{bound}"))))
                    );
                }
                let _ = writeln!(
                    out,
                    "{name}_bucket{} {}",
                    render_labels(labels, Some(("le", "+Inf".to_string()))),
                    h.count
                );
                let _ = writeln!(out, "{name}_sum{} {}", render_labels(labels, None), h.sum);
                let _ = writeln!(
                    out,
                    "{name}_count{} {}",
                    render_labels(labels, None),
                    h.count
                );
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
        m.shift_gauge(&IN_FLIGHT, &[], 1.0);
        m.observe_seconds(&OVERHEAD, &[("model", "m")], 0.001);
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
}
