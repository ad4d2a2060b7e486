//! Groups: a `Vec` of validators and an `Option` of one are validators too, and what a group
//! does when it is called as one (inside a wrapper that is not a group).

use super::leaves::{push_leaves, validate_leaves, Verdict};
use super::{FailMode, Unavailable, Validation, Validator};
use crate::partial::PartialCheck;
use crate::{Context, Issue, Reply};
use async_trait::async_trait;

/// A group: the members in order. It has no name of its own (empty); its members' issues carry
/// the members' names.
///
/// In the loop each member counts as if listed on its own (see [`Validator::members`]). Called
/// directly (or through a wrapper that is not a group), it validates every member; a member
/// without verdict and without a fail mode of its own makes the whole group [`Unavailable`],
/// and the caller's fail mode decides. Its repair runs each member's repair, in order, with
/// that member's own issues.
#[async_trait]
impl<V: Validator> Validator for Vec<V> {
    fn name(&self) -> &str {
        ""
    }

    async fn validate(&self, response: &str, context: &Context) -> Validation {
        validate_group(self, &Reply::text(response), context).await
    }

    async fn validate_reply(&self, reply: &Reply, context: &Context) -> Validation {
        validate_group(self, reply, context).await
    }

    fn repair(&self, response: &str, context: &Context, issues: &[Issue]) -> Option<String> {
        repair_group(self, response, context, issues)
    }

    fn partial_check<'a>(&'a self, context: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
        GroupCheck::start(self, context)
    }

    fn repair_fixes(&self, issue: &Issue) -> bool {
        group_repair_fixes(self, issue)
    }

    fn members(&self) -> Option<Vec<&dyn Validator>> {
        Some(self.iter().map(|v| v as &dyn Validator).collect())
    }

    fn reads_response(&self) -> bool {
        self.iter().any(Validator::reads_response)
    }

    fn reads_request(&self) -> bool {
        self.iter().any(Validator::reads_request)
    }
}

/// A validator that may be left out: `None` checks nothing, `Some(v)` is `v` (same name, same
/// fail mode), e.g. a validator that only exists when its configuration is given.
#[async_trait]
impl<V: Validator> Validator for Option<V> {
    fn name(&self) -> &str {
        self.as_ref().map_or("", |v| v.name())
    }

    async fn validate(&self, response: &str, context: &Context) -> Validation {
        match self {
            Some(v) => v.validate(response, context).await,
            None => Ok(Vec::new()),
        }
    }

    async fn validate_reply(&self, reply: &Reply, context: &Context) -> Validation {
        match self {
            Some(v) => v.validate_reply(reply, context).await,
            None => Ok(Vec::new()),
        }
    }

    fn repair(&self, response: &str, context: &Context, issues: &[Issue]) -> Option<String> {
        self.as_ref()?.repair(response, context, issues)
    }

    fn partial_check<'a>(&'a self, context: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
        self.as_ref()?.partial_check(context)
    }

    fn repair_fixes(&self, issue: &Issue) -> bool {
        self.as_ref().is_some_and(|v| v.repair_fixes(issue))
    }

    fn fail_mode(&self) -> Option<FailMode> {
        self.as_ref()?.fail_mode()
    }

    fn unavailable_status(&self) -> Option<&str> {
        self.as_ref()?.unavailable_status()
    }

    fn members(&self) -> Option<Vec<&dyn Validator>> {
        Some(self.iter().map(|v| v as &dyn Validator).collect())
    }

    fn reads_response(&self) -> bool {
        self.as_ref().is_some_and(|v| v.reads_response())
    }

    fn reads_request(&self) -> bool {
        self.as_ref().is_some_and(|v| v.reads_request())
    }
}

/// A group validated on its own, outside the loop: see the `Vec` impl.
pub(super) async fn validate_group(
    group: &dyn Validator,
    reply: &Reply,
    context: &Context,
) -> Validation {
    let mut leaves = Vec::new();
    push_leaves(group, None, &mut leaves);
    // Without the policy at hand, a member that has no answer of its own passes "no verdict"
    // up, and the caller's fail mode decides.
    match validate_leaves(&leaves, reply, context, FailMode::Closed, None).await {
        Verdict::Found(found) => Ok(found.issues),
        Verdict::Unavailable(u) => Err(Unavailable::new(format!("{}: {}", u.validator, u.reason))),
    }
}

/// A group's repair outside the loop: each member's repair with the issues carrying its name.
fn repair_group(
    group: &dyn Validator,
    text: &str,
    context: &Context,
    issues: &[Issue],
) -> Option<String> {
    let mut leaves = Vec::new();
    push_leaves(group, None, &mut leaves);
    let mut current = text.to_string();
    for leaf in &leaves {
        let name = leaf.validator.name();
        let own: Vec<Issue> = issues
            .iter()
            .filter(|i| i.validator == name)
            .cloned()
            .collect();
        if own.is_empty() {
            continue;
        }
        if let Some(repaired) = leaf.validator.repair(&current, context, &own) {
            current = repaired;
        }
    }
    (current != text).then_some(current)
}

/// A group's answer to [`Validator::repair_fixes`]: the member the issue names answers.
fn group_repair_fixes(group: &dyn Validator, issue: &Issue) -> bool {
    let mut leaves = Vec::new();
    push_leaves(group, None, &mut leaves);
    leaves
        .iter()
        .any(|leaf| leaf.validator.name() == issue.validator && leaf.validator.repair_fixes(issue))
}

/// The checkers of a group's members, for a group checked as one (inside a wrapper that is
/// not a group): each member's issues carry its name.
pub(crate) struct GroupCheck<'a> {
    members: Vec<(&'a str, Box<dyn PartialCheck + 'a>)>,
}

impl<'a> GroupCheck<'a> {
    /// A checker over the members of `group` that have one; `None` when none has.
    pub(crate) fn start(
        group: &'a dyn Validator,
        context: &'a Context,
    ) -> Option<Box<dyn PartialCheck + 'a>> {
        let mut leaves = Vec::new();
        push_leaves(group, None, &mut leaves);
        let members: Vec<_> = leaves
            .into_iter()
            .filter_map(|leaf| {
                let check = leaf.validator.partial_check(context)?;
                Some((leaf.validator.name(), check))
            })
            .collect();
        if members.is_empty() {
            None
        } else {
            Some(Box::new(GroupCheck { members }))
        }
    }
}

#[async_trait]
impl PartialCheck for GroupCheck<'_> {
    async fn check(&mut self, prefix: &str) -> Vec<Issue> {
        let mut found = Vec::new();
        for (name, check) in &mut self.members {
            found.extend(
                check
                    .check(prefix)
                    .await
                    .into_iter()
                    .map(|i| i.or_validator(name)),
            );
        }
        found
    }
}
