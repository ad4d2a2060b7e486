//! The report's numbers, gathered record by record ([`Aggregator::add`]) so that memory grows
//! with the number of distinct codes, hours and requests' latencies, never with file size.

use super::read::{FileSummary, Record};
use enforce_core::{Severity, Status};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, UNIX_EPOCH};

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
const WEEK_MS: i64 = 7 * DAY_MS;
/// 1970-01-05, the first Monday after the Unix epoch: weeks start on Mondays.
const FIRST_MONDAY_MS: i64 = 4 * DAY_MS;
/// More buckets than this are listed as found, without empty ones between them.
const MAX_FILLED_BUCKETS: i64 = 2000;
/// The profile of records that name none (proxy lines before profiles were recorded).
pub const UNKNOWN_PROFILE: &str = "(unknown)";

/// The width of the time buckets of "outcomes over time".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Bucket {
    /// One hour.
    Hour,
    /// One day (UTC).
    Day,
    /// One week, Monday to Sunday (UTC).
    Week,
}

impl Bucket {
    fn width_ms(self) -> i64 {
        match self {
            Bucket::Hour => HOUR_MS,
            Bucket::Day => DAY_MS,
            Bucket::Week => WEEK_MS,
        }
    }

    /// The start of the bucket holding `ms`.
    fn start_of(self, ms: i64) -> i64 {
        let origin = if self == Bucket::Week {
            FIRST_MONDAY_MS
        } else {
            0
        };
        (ms - origin).div_euclid(self.width_ms()) * self.width_ms() + origin
    }

    /// Hours for up to two days, days for up to four months, weeks beyond.
    fn for_span(span_ms: i64) -> Bucket {
        if span_ms <= 2 * DAY_MS {
            Bucket::Hour
        } else if span_ms <= 120 * DAY_MS {
            Bucket::Day
        } else {
            Bucket::Week
        }
    }
}

/// What to count.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Leave out records older than this (Unix ms) and records without a time.
    pub since_ms: Option<i64>,
    /// Bucket width of the time series; `None` picks one from the time span.
    pub bucket: Option<Bucket>,
}

/// Requests by final status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StatusCounts {
    /// All of them.
    pub total: u64,
    /// `passed`: a response passed every validator.
    pub passed: u64,
    /// `repaired`: repairs made the last response pass.
    pub repaired: u64,
    /// `unresolved`: errors remained after re-asks and repairs.
    pub unresolved: u64,
    /// `unavailable`: a required validator gave no verdict.
    pub unavailable: u64,
    /// `aborted`: the loop stopped early.
    pub aborted: u64,
}

impl StatusCounts {
    fn add(&mut self, status: Status) {
        self.total += 1;
        *match status {
            Status::Passed => &mut self.passed,
            Status::Repaired => &mut self.repaired,
            Status::Unresolved => &mut self.unresolved,
            Status::Unavailable => &mut self.unavailable,
            Status::Aborted => &mut self.aborted,
        } += 1;
    }

    fn merge(&mut self, other: &StatusCounts) {
        self.total += other.total;
        self.passed += other.passed;
        self.repaired += other.repaired;
        self.unresolved += other.unresolved;
        self.unavailable += other.unavailable;
        self.aborted += other.aborted;
    }

    /// The count for `status`.
    pub fn get(&self, status: Status) -> u64 {
        match status {
            Status::Passed => self.passed,
            Status::Repaired => self.repaired,
            Status::Unresolved => self.unresolved,
            Status::Unavailable => self.unavailable,
            Status::Aborted => self.aborted,
        }
    }
}

/// Every status, in report order.
pub const STATUSES: [Status; 5] = [
    Status::Passed,
    Status::Repaired,
    Status::Unresolved,
    Status::Unavailable,
    Status::Aborted,
];

/// The whole report: what `--format json` prints and the text and HTML renderers show.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Each file read.
    pub files: Vec<FileSummary>,
    /// Lines and records over all files.
    pub input: InputCounts,
    /// The `--since` bound, RFC 3339, when given.
    pub since: Option<String>,
    /// Requests by final status.
    pub outcomes: StatusCounts,
    /// Requests by profile and final status.
    pub profiles: Vec<ProfileOutcomes>,
    /// Requests by time bucket and final status.
    pub over_time: TimeSeries,
    /// Issue codes by profile and validator, most frequent first.
    pub issue_codes: Vec<CodeCount>,
    /// How often the next attempt no longer had an error code, most re-asked first.
    pub reask_fixes: Vec<CodeFixes>,
    /// Which strategy fixed which issue code, at what token cost, most re-asked first.
    pub strategies: Vec<crate::strategies::StrategyFixes>,
    /// Repairs that changed a response.
    pub repairs: Repairs,
    /// Attempts per request.
    pub attempts: AttemptStats,
    /// Tokens and cost of first attempts and of re-asks.
    pub spend: Spend,
    /// Latency percentiles.
    pub latency: Latency,
    /// Streamed attempts cut early.
    pub cuts: Cuts,
    /// Requests by the route the proxy picked, most first.
    pub routes: Vec<RouteCount>,
    /// Requests by what the input stage did, most first.
    pub input_checks: Vec<NamedCount>,
    /// Requests by the name of the API key that made them (`key`), most first.
    pub keys: Vec<NamedCount>,
    /// Requests that set their own limits (`request_limits`).
    pub request_limits: u64,
}

/// Requests that took one route.
#[derive(Debug, Clone, Serialize)]
pub struct RouteCount {
    /// The route's name.
    pub route: String,
    /// The profile it picked.
    pub profile: String,
    /// What matched (`field`, `header`, `matches`, `classify`, `default`).
    pub by: String,
    /// Requests.
    pub requests: u64,
}

/// Lines and records over all files.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct InputCounts {
    /// Lines read.
    pub lines: u64,
    /// Lines that were records.
    pub records: u64,
    /// Lines that were `refused` records (requests refused before any enforcement).
    pub refused: u64,
    /// Lines that were not (skipped).
    pub invalid: u64,
    /// Records older than `--since` (left out).
    pub before_since: u64,
    /// Records without a time, left out because `--since` was given.
    pub undated_left_out: u64,
    /// Records counted in the report.
    pub counted: u64,
}

/// One profile's outcomes.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileOutcomes {
    /// The profile (`(unknown)` for records naming none).
    pub profile: String,
    /// Its requests by final status.
    pub outcomes: StatusCounts,
}

/// Outcomes over time.
#[derive(Debug, Clone, Serialize)]
pub struct TimeSeries {
    /// The bucket width (`None` when no record had a time).
    pub bucket: Option<Bucket>,
    /// Counted records without a time (in no bucket).
    pub undated: u64,
    /// The buckets, oldest first; empty buckets between the first and last are listed.
    pub buckets: Vec<TimeBucket>,
}

/// One time bucket.
#[derive(Debug, Clone, Serialize)]
pub struct TimeBucket {
    /// Its start, RFC 3339 UTC.
    pub start: String,
    /// Requests that finished in it, by final status.
    pub outcomes: StatusCounts,
}

/// How often one issue code was found.
#[derive(Debug, Clone, Serialize)]
pub struct CodeCount {
    /// The profile enforced.
    pub profile: String,
    /// The validator that raised it.
    pub validator: String,
    /// The stable issue code.
    pub code: String,
    /// Error or warning.
    pub severity: Severity,
    /// Times found, over every attempt of every request.
    pub occurrences: u64,
    /// Requests with at least one attempt that had it.
    pub requests: u64,
}

/// How often re-asking fixed one error code.
#[derive(Debug, Clone, Serialize)]
pub struct CodeFixes {
    /// The validator that raised it.
    pub validator: String,
    /// The stable issue code.
    pub code: String,
    /// Attempts that had the code and were followed by another attempt.
    pub reasked: u64,
    /// Of those, the next attempt no longer had it and the request ended passed or repaired.
    pub fixed: u64,
    /// `fixed / reasked`.
    pub rate: f64,
    /// The same, by the number of the attempt that had the code.
    pub by_attempt: Vec<AttemptFixes>,
}

/// Re-asks after attempt `attempt`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AttemptFixes {
    /// The number of the attempt that had the code.
    pub attempt: u32,
    /// Times it was followed by another attempt.
    pub reasked: u64,
    /// Of those, times the next attempt no longer had it and the request ended well.
    pub fixed: u64,
}

/// Repairs that changed a response.
#[derive(Debug, Clone, Serialize)]
pub struct Repairs {
    /// Requests with at least one repair applied.
    pub requests: u64,
    /// Repairs applied, by validator, most first.
    pub by_validator: Vec<NamedCount>,
}

/// A name and how often.
#[derive(Debug, Clone, Serialize)]
pub struct NamedCount {
    /// The name.
    pub name: String,
    /// How often.
    pub count: u64,
}

/// Attempts per request.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptStats {
    /// Attempts over all requests.
    pub total: u64,
    /// Mean per request.
    pub mean: f64,
    /// Requests by their number of attempts, fewest first.
    pub distribution: Vec<AttemptCount>,
}

/// Requests that took `attempts` attempts.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AttemptCount {
    /// Attempts per request.
    pub attempts: u64,
    /// Requests that took that many.
    pub requests: u64,
}

/// Tokens and cost of first attempts and of re-asks.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Spend {
    /// Attempt 1 of each request.
    pub first_attempts: SpendPart,
    /// Attempts 2 and later.
    pub reasks: SpendPart,
}

/// Tokens and cost of a set of attempts.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct SpendPart {
    /// Attempts.
    pub attempts: u64,
    /// Of those, attempts whose runner reported token usage.
    pub with_usage: u64,
    /// Input tokens they reported.
    pub input_tokens: u64,
    /// Output tokens they reported.
    pub output_tokens: u64,
    /// Of those, attempts whose runner reported a cost.
    pub with_cost: u64,
    /// The cost they reported, USD.
    pub cost_usd: f64,
}

impl SpendPart {
    fn add(&mut self, attempt: &super::read::AttemptRecord) {
        self.attempts += 1;
        if let Some(usage) = attempt.usage {
            self.with_usage += 1;
            self.input_tokens = self.input_tokens.saturating_add(usage.input_tokens);
            self.output_tokens = self.output_tokens.saturating_add(usage.output_tokens);
        }
        if let Some(cost) = attempt.cost_usd.filter(|c| c.is_finite()) {
            self.with_cost += 1;
            self.cost_usd += cost;
        }
    }
}

/// Latency percentiles, µs.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    /// Wall time of the whole enforcement (`total_us`).
    pub total: Percentiles,
    /// Waiting on the model (`runner_us`).
    pub upstream: Percentiles,
    /// enforce's own time: validation, repairs, bookkeeping (`total_us - runner_us`).
    pub own: Percentiles,
}

/// Nearest-rank percentiles of a set of values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Percentiles {
    /// Values.
    pub count: u64,
    /// The median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// The largest value.
    pub max: u64,
}

impl Percentiles {
    /// Nearest rank: the smallest value with at least p% of the values at or below it.
    pub fn of(mut values: Vec<u64>) -> Percentiles {
        values.sort_unstable();
        let rank = |p: u64| -> u64 {
            let n = values.len() as u64;
            let r = (p * n).div_ceil(100).max(1);
            values.get((r - 1) as usize).copied().unwrap_or(0)
        };
        Percentiles {
            count: values.len() as u64,
            p50: rank(50),
            p90: rank(90),
            p99: rank(99),
            max: values.last().copied().unwrap_or(0),
        }
    }
}

/// Streamed attempts cut early (the attempt's `cut` field).
#[derive(Debug, Clone, Serialize)]
pub struct Cuts {
    /// Attempts cut.
    pub attempts: u64,
    /// The codes that caused the cuts, most first.
    pub by_code: Vec<NamedCount>,
    /// Bytes of the answer received when it was cut.
    pub bytes: Percentiles,
    /// Output tokens the cut attempts generated before their cut (reported or estimated):
    /// what early abort still spent on failing answers.
    pub output_tokens: u64,
    /// Of the cut attempts, those whose usage is enforce's estimate (`usage_estimated`).
    pub estimated_usage: u64,
}

/// Gathers the numbers one record at a time.
#[derive(Debug, Default)]
pub struct Aggregator {
    options: Options,
    input: InputCounts,
    outcomes: StatusCounts,
    profiles: BTreeMap<String, StatusCounts>,
    /// By the hour (the finest bucket); coarsened at the end.
    hours: BTreeMap<i64, StatusCounts>,
    undated: u64,
    codes: BTreeMap<(String, String, String, Severity), (u64, u64)>,
    fixes: BTreeMap<(String, String), BTreeMap<u32, (u64, u64)>>,
    strategies: crate::strategies::StrategyCounter,
    repairs: BTreeMap<String, u64>,
    repaired_requests: u64,
    attempts: BTreeMap<u64, u64>,
    spend: Spend,
    total_us: Vec<u64>,
    runner_us: Vec<u64>,
    own_us: Vec<u64>,
    cut_attempts: u64,
    cut_codes: BTreeMap<String, u64>,
    /// (route, profile, by) → requests.
    routes: BTreeMap<(String, String, String), u64>,
    input_actions: BTreeMap<String, u64>,
    keys: BTreeMap<String, u64>,
    request_limits: u64,
    cut_bytes: Vec<u64>,
    cut_output_tokens: u64,
    cut_estimated: u64,
}

/// The `(validator, code)` pairs of an attempt's errors, each once.
fn error_codes(attempt: &super::read::AttemptRecord) -> BTreeSet<(&str, &str)> {
    attempt
        .issues
        .iter()
        .filter(|i| i.severity == Severity::Error)
        .map(|i| (i.validator.as_str(), i.code.as_str()))
        .collect()
}

fn by_count_desc(map: BTreeMap<String, u64>) -> Vec<NamedCount> {
    let mut list: Vec<NamedCount> = map
        .into_iter()
        .map(|(name, count)| NamedCount { name, count })
        .collect();
    list.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
    list
}

/// `ms` as RFC 3339 UTC, to the second.
pub fn format_time_ms(ms: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(at).to_string()
}

impl Aggregator {
    /// An empty aggregator.
    pub fn new(options: Options) -> Self {
        Aggregator {
            options,
            ..Aggregator::default()
        }
    }

    /// Notes a file's line counts (its records arrive through [`add`](Self::add)).
    pub fn add_file(&mut self, file: &FileSummary) {
        self.input.lines += file.lines;
        self.input.records += file.records;
        self.input.invalid += file.invalid;
        self.input.refused += file.refused;
    }

    /// Counts one record (unless `--since` leaves it out).
    pub fn add(&mut self, record: &Record) {
        let time = record.time_ms();
        if let Some(since) = self.options.since_ms {
            match time {
                None => {
                    self.input.undated_left_out += 1;
                    return;
                }
                Some(t) if t < since => {
                    self.input.before_since += 1;
                    return;
                }
                Some(_) => {}
            }
        }
        self.input.counted += 1;
        let status = record.status;
        self.outcomes.add(status);
        let profile = record.profile.as_deref().unwrap_or(UNKNOWN_PROFILE);
        self.profiles
            .entry(profile.to_string())
            .or_default()
            .add(status);
        match time {
            Some(t) => self
                .hours
                .entry(Bucket::Hour.start_of(t))
                .or_default()
                .add(status),
            None => self.undated += 1,
        }

        self.count_codes(record, profile);
        self.count_fixes(record);
        self.strategies.add(record);
        if let Some(route) = &record.route {
            let key = (route.name.clone(), route.profile.clone(), route.by.clone());
            *self.routes.entry(key).or_default() += 1;
        }
        if let Some(input) = &record.input {
            *self.input_actions.entry(input.action.clone()).or_default() += 1;
        }
        if let Some(key) = &record.key {
            *self.keys.entry(key.clone()).or_default() += 1;
        }
        self.request_limits += u64::from(record.request_limits.is_some());
        *self
            .attempts
            .entry(record.attempts.len() as u64)
            .or_default() += 1;
        let mut repaired = false;
        for (index, attempt) in record.attempts.iter().enumerate() {
            let number = attempt.number.unwrap_or(index as u32 + 1);
            if number <= 1 {
                self.spend.first_attempts.add(attempt);
            } else {
                self.spend.reasks.add(attempt);
            }
            for validator in &attempt.repairs {
                repaired = true;
                *self.repairs.entry(validator.clone()).or_default() += 1;
            }
            if let Some(cut) = &attempt.cut {
                self.cut_attempts += 1;
                for code in &cut.codes {
                    *self.cut_codes.entry(code.clone()).or_default() += 1;
                }
                self.cut_bytes.extend(cut.bytes);
                if let Some(usage) = attempt.usage {
                    self.cut_output_tokens =
                        self.cut_output_tokens.saturating_add(usage.output_tokens);
                }
                self.cut_estimated += u64::from(attempt.usage_estimated);
            }
        }
        self.repaired_requests += u64::from(repaired);
        if let Some(total) = record.total_us {
            self.total_us.push(total);
            if let Some(runner) = record.runner_us {
                self.runner_us.push(runner);
                self.own_us.push(total.saturating_sub(runner));
            }
        }
    }

    fn count_codes(&mut self, record: &Record, profile: &str) {
        let mut seen = BTreeSet::new();
        for issue in record.attempts.iter().flat_map(|a| &a.issues) {
            let key = (
                profile.to_string(),
                issue.validator.clone(),
                issue.code.clone(),
                issue.severity,
            );
            let first_time = seen.insert(key.clone());
            let (occurrences, requests) = self.codes.entry(key).or_default();
            *occurrences += 1;
            *requests += u64::from(first_time);
        }
    }

    /// For each attempt followed by another: its error codes were re-asked for; a code absent
    /// from the next attempt of a request that ended passed or repaired was fixed by it.
    fn count_fixes(&mut self, record: &Record) {
        let mut attempts: Vec<(u32, &super::read::AttemptRecord)> = record
            .attempts
            .iter()
            .enumerate()
            .map(|(i, a)| (a.number.unwrap_or(i as u32 + 1), a))
            .collect();
        attempts.sort_by_key(|(number, _)| *number);
        let success = record.status.is_success();
        for pair in attempts.windows(2) {
            let [(number, now), (_, next)] = pair else {
                continue;
            };
            let next_codes = error_codes(next);
            for (validator, code) in error_codes(now) {
                let slot = self
                    .fixes
                    .entry((validator.to_string(), code.to_string()))
                    .or_default()
                    .entry(*number)
                    .or_default();
                slot.0 += 1;
                if success && !next_codes.contains(&(validator, code)) {
                    slot.1 += 1;
                }
            }
        }
    }

    /// The report.
    pub fn finish(self, files: Vec<FileSummary>, since: Option<String>) -> Report {
        let over_time = self.time_series();
        let mut issue_codes: Vec<CodeCount> = self
            .codes
            .into_iter()
            .map(
                |((profile, validator, code, severity), (occurrences, requests))| CodeCount {
                    profile,
                    validator,
                    code,
                    severity,
                    occurrences,
                    requests,
                },
            )
            .collect();
        issue_codes.sort_by_key(|c| std::cmp::Reverse(c.occurrences));
        let mut reask_fixes: Vec<CodeFixes> = self
            .fixes
            .into_iter()
            .map(|((validator, code), by_number)| {
                let by_attempt: Vec<AttemptFixes> = by_number
                    .into_iter()
                    .map(|(attempt, (reasked, fixed))| AttemptFixes {
                        attempt,
                        reasked,
                        fixed,
                    })
                    .collect();
                let reasked = by_attempt.iter().map(|a| a.reasked).sum();
                let fixed = by_attempt.iter().map(|a| a.fixed).sum();
                CodeFixes {
                    validator,
                    code,
                    reasked,
                    fixed,
                    rate: ratio(fixed, reasked),
                    by_attempt,
                }
            })
            .collect();
        reask_fixes.sort_by_key(|f| std::cmp::Reverse(f.reasked));
        let total_attempts: u64 = self.attempts.iter().map(|(n, r)| n * r).sum();
        Report {
            files,
            input: self.input,
            since,
            outcomes: self.outcomes,
            profiles: self
                .profiles
                .into_iter()
                .map(|(profile, outcomes)| ProfileOutcomes { profile, outcomes })
                .collect(),
            over_time,
            issue_codes,
            reask_fixes,
            strategies: self.strategies.finish(),
            repairs: Repairs {
                requests: self.repaired_requests,
                by_validator: by_count_desc(self.repairs),
            },
            attempts: AttemptStats {
                total: total_attempts,
                mean: ratio(total_attempts, self.outcomes.total),
                distribution: self
                    .attempts
                    .into_iter()
                    .map(|(attempts, requests)| AttemptCount { attempts, requests })
                    .collect(),
            },
            spend: self.spend,
            latency: Latency {
                total: Percentiles::of(self.total_us),
                upstream: Percentiles::of(self.runner_us),
                own: Percentiles::of(self.own_us),
            },
            cuts: Cuts {
                attempts: self.cut_attempts,
                by_code: by_count_desc(self.cut_codes),
                bytes: Percentiles::of(self.cut_bytes),
                output_tokens: self.cut_output_tokens,
                estimated_usage: self.cut_estimated,
            },
            routes: {
                let mut routes: Vec<RouteCount> = self
                    .routes
                    .into_iter()
                    .map(|((route, profile, by), requests)| RouteCount {
                        route,
                        profile,
                        by,
                        requests,
                    })
                    .collect();
                routes.sort_by_key(|r| std::cmp::Reverse(r.requests));
                routes
            },
            input_checks: by_count_desc(self.input_actions),
            keys: by_count_desc(self.keys),
            request_limits: self.request_limits,
        }
    }

    fn time_series(&self) -> TimeSeries {
        let (Some((&first, _)), Some((&last, _))) =
            (self.hours.first_key_value(), self.hours.last_key_value())
        else {
            return TimeSeries {
                bucket: None,
                undated: self.undated,
                buckets: Vec::new(),
            };
        };
        let bucket = self
            .options
            .bucket
            .unwrap_or_else(|| Bucket::for_span(last - first));
        let mut buckets: BTreeMap<i64, StatusCounts> = BTreeMap::new();
        let (from, to) = (bucket.start_of(first), bucket.start_of(last));
        if (to - from) / bucket.width_ms() < MAX_FILLED_BUCKETS {
            let mut at = from;
            while at <= to {
                buckets.insert(at, StatusCounts::default());
                at += bucket.width_ms();
            }
        }
        for (&hour, counts) in &self.hours {
            buckets
                .entry(bucket.start_of(hour))
                .or_default()
                .merge(counts);
        }
        TimeSeries {
            bucket: Some(bucket),
            undated: self.undated,
            buckets: buckets
                .into_iter()
                .map(|(start, outcomes)| TimeBucket {
                    start: format_time_ms(start),
                    outcomes,
                })
                .collect(),
        }
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

#[cfg(test)]
mod tests;
