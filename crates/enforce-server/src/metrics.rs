//! A small Prometheus registry: labelled counters, gauges and histograms rendered in the text
//! exposition format. Hand-rolled because the proxy needs a dozen series, not a metrics
//! framework.

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
}
