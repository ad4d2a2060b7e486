//! The validators the loop runs one by one ([`Leaf`]: groups opened up), and how it runs
//! and repairs them all on one text.

use super::{FailMode, UnavailableValidator, Validator, VALIDATOR_UNAVAILABLE};
use crate::{Context, Issue, Reply};
use std::ops::Range;

/// One validator the loop runs on its own, with the fail mode its groups hand down.
#[derive(Clone, Copy)]
pub(crate) struct Leaf<'a> {
    pub(crate) validator: &'a dyn Validator,
    inherited: Option<FailMode>,
}

impl Leaf<'_> {
    /// The leaf's own fail mode, else its nearest group's, else `default` (the policy's).
    fn fail_mode(&self, default: FailMode) -> FailMode {
        self.validator
            .fail_mode()
            .or(self.inherited)
            .unwrap_or(default)
    }
}

/// Appends the validators `validator` stands for: itself, or its members' leaves.
pub(crate) fn push_leaves<'a>(
    validator: &'a dyn Validator,
    inherited: Option<FailMode>,
    out: &mut Vec<Leaf<'a>>,
) {
    match validator.members() {
        Some(members) => {
            let inherited = validator.fail_mode().or(inherited);
            for member in members {
                push_leaves(member, inherited, out);
            }
        }
        None => out.push(Leaf {
            validator,
            inherited,
        }),
    }
}

/// What every leaf found in one text: the issues in leaf order, and which are whose.
#[derive(Debug, Default, Clone)]
pub(crate) struct Found {
    pub(crate) issues: Vec<Issue>,
    /// `issues[by_leaf[i].clone()]` came from leaf `i`.
    by_leaf: Vec<Range<usize>>,
}

impl Found {
    /// Issues that belong to no leaf's repair (those that cut an answer short).
    pub(crate) fn unattributed(issues: Vec<Issue>) -> Self {
        Found {
            issues,
            by_leaf: Vec::new(),
        }
    }

    /// Puts `issue` (one of no leaf) before all others.
    pub(crate) fn insert_first(&mut self, issue: Issue) {
        self.issues.insert(0, issue);
        for range in &mut self.by_leaf {
            *range = range.start.saturating_add(1)..range.end.saturating_add(1);
        }
    }

    /// The errors leaf `index` raised.
    fn errors_of(&self, index: usize) -> Vec<Issue> {
        self.by_leaf
            .get(index)
            .and_then(|range| self.issues.get(range.clone()))
            .unwrap_or_default()
            .iter()
            .filter(|i| i.is_error())
            .cloned()
            .collect()
    }
}

/// The verdict of all leaves on one text.
pub(crate) enum Verdict {
    Found(Found),
    Unavailable(UnavailableValidator),
}

/// Runs every leaf on `reply`, stamping each leaf's name on its unnamed issues. A leaf without
/// verdict that fails open becomes a `VALIDATOR_UNAVAILABLE` warning; one that fails closed
/// ends the verdict.
pub(crate) async fn validate_leaves(
    leaves: &[Leaf<'_>],
    reply: &Reply,
    context: &Context,
    default: FailMode,
    mut on_ran: Option<&mut (dyn FnMut(LeafRun<'_>) + Send)>,
) -> Verdict {
    let mut found = Found {
        issues: Vec::new(),
        by_leaf: Vec::with_capacity(leaves.len()),
    };
    for leaf in leaves {
        let start = found.issues.len();
        let name = leaf.validator.name();
        // The clock is read only for a listener (see `Observer::wants_validator_runs`).
        let started = on_ran.is_some().then(std::time::Instant::now);
        let mut no_verdict = None;
        match leaf.validator.validate_reply(reply, context).await {
            Ok(issues) => found
                .issues
                .extend(issues.into_iter().map(|i| i.or_validator(name))),
            Err(unavailable) => match leaf.fail_mode(default) {
                FailMode::Closed => {
                    if let (Some(report), Some(started)) = (on_ran.as_mut(), started) {
                        report(LeafRun {
                            validator: name,
                            issues: &[],
                            unavailable: Some(&unavailable.reason),
                            elapsed: started.elapsed(),
                        });
                    }
                    return Verdict::Unavailable(UnavailableValidator {
                        validator: name.to_string(),
                        reason: unavailable.reason,
                    });
                }
                FailMode::Open => {
                    found.issues.push(
                        Issue::warning(
                            name,
                            VALIDATOR_UNAVAILABLE,
                            format!("not checked: {}", unavailable.reason),
                        )
                        .with_hint(
                            "the validator failed open; the response was passed without this check",
                        ),
                    );
                    no_verdict = Some(unavailable.reason);
                }
            },
        }
        if let (Some(report), Some(started)) = (on_ran.as_mut(), started) {
            report(LeafRun {
                validator: name,
                issues: &found.issues[start..],
                unavailable: no_verdict.as_deref(),
                elapsed: started.elapsed(),
            });
        }
        found.by_leaf.push(start..found.issues.len());
    }
    Verdict::Found(found)
}

/// One validator run as [`validate_leaves`] reports it to a listener.
pub(crate) struct LeafRun<'a> {
    pub validator: &'a str,
    pub issues: &'a [Issue],
    pub unavailable: Option<&'a str>,
    pub elapsed: std::time::Duration,
}

/// Runs the repair of every leaf that raised an error on `text`, in leaf order, each with its
/// own errors, telling `on_applied` the name of each whose repair changed the text. Returns
/// the repaired text and those names.
pub(crate) fn repair_leaves(
    leaves: &[Leaf<'_>],
    text: &str,
    context: &Context,
    found: &Found,
    mut on_applied: impl FnMut(&str),
) -> (String, Vec<String>) {
    let mut current = text.to_string();
    let mut applied = Vec::new();
    for (index, leaf) in leaves.iter().enumerate() {
        let own = found.errors_of(index);
        if own.is_empty() {
            continue;
        }
        if let Some(repaired) = leaf.validator.repair(&current, context, &own) {
            if repaired != current {
                let name = leaf.validator.name();
                on_applied(name);
                applied.push(name.to_string());
                current = repaired;
            }
        }
    }
    (current, applied)
}
