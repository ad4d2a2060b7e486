//! The loop of [`Enforcer::run_with`] in named steps: the input stage, one attempt, the stop
//! rules, and the re-ask that follows a failed attempt.

use super::run::{Asked, Received, Run, Spent};
use super::{error_codes, error_set, message_bytes, reseeded, seed_of, truncated, Enforcer};
use super::{CONSTRAINT_UNAVAILABLE, ESCALATION_NO_TARGET};
use crate::input::{request_context, Staged};
use crate::outcome::FreeAnswer;
use crate::policy::FirstAttempt;
use crate::time::micros;
use crate::validator::{push_leaves, Found, Verdict};
use crate::{
    input::InputCheck, outcome::Cut, policy::Reask, runner::FinishReason,
    validator::UnavailableValidator, Ask, Context, Event, FollowUp, Issue, Message, Reply, Request,
    Runner, RunnerError, Status, StopReason, Usage, Validator,
};
use std::borrow::Cow;
use std::time::{Duration, Instant};

/// What the input stage leaves for the loop.
pub(super) struct Admitted {
    /// The request as the input stage rewrote it, if it did.
    pub(super) request: Option<Request>,
    /// The request context the validators see, when one was built.
    pub(super) view: Option<Context>,
    /// The input stage's record.
    pub(super) input: Option<InputCheck>,
    /// Why the run ends before the first ask, if it does.
    pub(super) stopped: Option<StopReason>,
}

/// The answer being improved, and the feedback a re-ask sends about it.
struct Previous {
    reply: Reply,
    found: Found,
    feedback: String,
}

/// An answer an attempt brought, with what the validators (or the partial checks that cut it)
/// found.
struct Answer {
    reply: Reply,
    found: Found,
    /// Cut short while it streamed: the part received.
    cut: bool,
}

/// How an attempt ended without an answer to judge.
enum NoAnswer {
    /// A validator gave no verdict on `reply`.
    Unavailable {
        reply: Reply,
        unavailable: UnavailableValidator,
    },
    /// The runner failed.
    RunnerFailed(RunnerError),
}

/// What one attempt sends: a first ask, a fresh ask (resample, fresh feedback), or a
/// follow-up about the previous answer.
enum Asking<'r, 'p> {
    Fresh(Cow<'r, Request>),
    FollowUp {
        request: Request,
        previous: &'p Previous,
    },
}

impl Asking<'_, '_> {
    /// Bytes of the messages sent: what an estimate of input tokens counts.
    fn sent_bytes(&self) -> usize {
        match self {
            Asking::Fresh(request) => message_bytes(request),
            Asking::FollowUp { request, previous } => message_bytes(request)
                .saturating_add(previous.reply.text.len())
                .saturating_add(previous.feedback.len()),
        }
    }

    /// The ask as the runner receives it, streamed or whole.
    fn ask(&self, stream: bool) -> Ask<'_> {
        let (request, follow_up) = match self {
            Asking::Fresh(request) => (request.as_ref(), None),
            Asking::FollowUp { request, previous } => (
                request,
                Some(FollowUp {
                    previous: &previous.reply,
                    feedback: &previous.feedback,
                }),
            ),
        };
        Ask {
            request,
            follow_up,
            stream,
        }
    }
}

/// What [`Enforcer::ask_for`] plans: an ask to send, or the two calls of reason-then-format,
/// whose second ask the first call's answer completes.
enum Planned<'r, 'p> {
    Ready(Asking<'r, 'p>),
    ReasonFirst(Box<TwoPass>),
}

/// The calls of a reason-then-format attempt: a free ask, and the format ask that gets the
/// free answer and `instruction`.
struct TwoPass {
    free: Request,
    format: Request,
    instruction: String,
}

impl TwoPass {
    /// The two calls for `asking` (the request as this attempt sends it): the free one
    /// without the decoding constraint, the format one with it; `feedback` about a failed
    /// attempt goes with the format instruction.
    fn of(asking: Request, feedback: Option<&str>) -> TwoPass {
        let mut free = without_constraint(asking.clone());
        free.messages.push(Message::user(REASON_FIRST));
        let format = Request {
            messages: free.messages.clone(),
            ..asking
        };
        let instruction = match feedback {
            Some(feedback) => format!("{FORMAT_NEXT}\n\n{EARLIER_REJECTED}\n\n{feedback}"),
            None => FORMAT_NEXT.to_string(),
        };
        TwoPass {
            free,
            format,
            instruction,
        }
    }
}

/// `request` without the decoding constraint its caller added (its `constraint_params`).
fn without_constraint(mut request: Request) -> Request {
    for key in std::mem::take(&mut request.constraint_params) {
        request.params.remove(&key);
    }
    request
}

/// The instruction of reason-then-format's free call.
const REASON_FIRST: &str = "First answer the question in plain words: think it \
through and give the answer. Do not worry about the output format yet; it comes in the next \
step.";

/// The instruction of reason-then-format's format call, after the free answer.
const FORMAT_NEXT: &str = "Now give exactly that answer in the format the question \
asks for, and nothing else.";

/// What precedes the feedback in the format call of a reason-then-format re-ask.
const EARLIER_REJECTED: &str = "An earlier answer in that format was rejected:";

/// The instruction a re-ask after a truncated answer sends, with more room, instead of
/// feedback about what the cut left broken.
pub(super) const SHORTER: &str = "Your previous answer was cut off at the token limit before \
it was complete. Answer again, completely and more briefly: leave out everything the task \
does not ask for.";

/// Whether `answer` shows that asking again changed nothing: a byte-identical repeat of an
/// earlier failed answer (text and tool calls), or, unless it was resampled, the same errors
/// as the answer the re-ask was about. Only a whole answer can show it: a cut one stopped
/// before its other errors were written. Resampled answers are independent draws: the same
/// error twice says nothing about the next.
fn no_progress(
    run: &Run<'_>,
    answer: &Answer,
    errors: &[(&str, Option<u32>, &str)],
    previous: Option<&Previous>,
) -> bool {
    if answer.cut {
        return false;
    }
    let repeated = run.reasked.iter().any(|(_, earlier, _)| {
        earlier.text == answer.reply.text && earlier.tool_calls == answer.reply.tool_calls
    });
    let resampled = matches!(run.asked.reask, Some(Reask::Resample | Reask::Constrained));
    let same_errors =
        !resampled && previous.is_some_and(|prev| error_set(&prev.found.issues) == errors);
    repeated || same_errors
}

/// Adds the warning `code` to the outcome's notes, unless an earlier re-ask of the run did.
pub(super) fn warn_once(run: &mut Run<'_>, code: &str, message: &str) {
    if !run.notes.iter().any(|n| n.code == code) {
        run.notes.push(Issue::warning("reask", code, message));
    }
}

impl Enforcer {
    /// The input stage, and the request as the validators that read it see it: only built
    /// when a profile asks for it, so a profile without either pays one branch.
    pub(super) async fn admit(
        &self,
        request: &Request,
        context: &Context,
        request_validators: &dyn Validator,
    ) -> Admitted {
        let Some(stage) = &self.input else {
            let reads_request = request_validators.reads_request()
                || self.validators.iter().any(|v| v.reads_request());
            let view = reads_request.then(|| request_context(request, context, None));
            return Admitted {
                request: None,
                view,
                input: None,
                stopped: None,
            };
        };
        let (request, view, record, stopped) = match stage
            .run(request, context, self.policy.on_unavailable)
            .await
        {
            Staged::Proceed {
                request,
                context,
                record,
            } => (request, Some(context), record, None),
            Staged::Rejected { record } => (None, None, record, Some(StopReason::InputRejected)),
            Staged::Unavailable {
                record,
                unavailable,
            } => (
                None,
                None,
                record,
                Some(StopReason::ValidatorUnavailable { unavailable }),
            ),
        };
        Admitted {
            request,
            view,
            input: Some(record),
            stopped,
        }
    }

    /// Asks, judges and re-asks until a stop rule ends the run.
    pub(super) async fn ask_until_done(
        &self,
        runner: &dyn Runner,
        request: &Request,
        request_validators: &dyn Validator,
        mut run: Run<'_>,
    ) -> crate::Outcome {
        run.leaves = {
            let mut leaves = Vec::with_capacity(run.leaves.len() + 1);
            push_leaves(request_validators, None, &mut leaves);
            leaves.append(&mut run.leaves);
            leaves
        };
        // The loop's ends other than a clean pass are boxed: this future is moved whole on
        // every request, and inline they made it several kilobytes larger.
        let mut previous: Option<Previous> = None;
        loop {
            let number = run.next_number();
            let attempted = self
                .attempt(runner, request, &mut run, number, previous.as_ref())
                .await;
            let mut answer = match attempted {
                Ok(answer) => answer,
                Err(NoAnswer::Unavailable { reply, unavailable }) => {
                    let reason = StopReason::ValidatorUnavailable { unavailable };
                    let last = Some((reply, Vec::new()));
                    return Box::pin(run.finish(Status::Unavailable, reason, last)).await;
                }
                Err(NoAnswer::RunnerFailed(error)) => {
                    if self.asks_again_after(&run, number, previous.is_some(), &error) {
                        continue;
                    }
                    let reason = StopReason::RunnerFailed { error };
                    return Box::pin(run.conclude_on(reason)).await;
                }
            };
            if let Some(reason) = self.stop_rule(&run, number, &answer, previous.as_ref()) {
                return Self::stop(run, reason, number, answer).await;
            }
            if !answer.cut && self.policy.repairs_first(&answer.found.issues) {
                let repaired = run.repaired(number, &answer.reply, &mut answer.found);
                if let Some(repaired) = repaired.await {
                    let last = Some(repaired);
                    return Box::pin(run.finish(Status::Repaired, StopReason::Clean, last)).await;
                }
            }
            previous = Some(self.reask_about(&mut run, number, answer).await);
        }
    }

    /// One attempt: asks (a first ask, or a re-ask about `previous`), reads the answer, and
    /// validates and records it.
    async fn attempt(
        &self,
        runner: &dyn Runner,
        request: &Request,
        run: &mut Run<'_>,
        number: u32,
        previous: Option<&Previous>,
    ) -> Result<Answer, NoAnswer> {
        let max_attempts = self.max_attempts();
        run.observer.on_event(&Event::Asking {
            attempt: number,
            max_attempts,
        });
        // Cutting is worth it only when a re-ask can follow and some validator can decide
        // on a prefix; without that (and without anyone watching the deltas) the whole
        // answer is asked for, as a stream would only cost. So the last allowed attempt
        // always runs to its end.
        let checks = if self.policy.early_abort && number < max_attempts {
            run.partial_checks()
        } else {
            Vec::new()
        };
        let asking = self.prepare(runner, request, run, number, previous).await?;
        let runner = match (&self.escalation, run.asked.escalated) {
            (Some(escalation), true) => escalation.runner.as_ref(),
            _ => runner,
        };
        let asked = Instant::now();
        let streamed = !checks.is_empty() || run.show_deltas;
        let (received, checking) = run
            .receive(runner.ask(asking.ask(streamed)), number, checks)
            .await;
        let runner_time = asked.elapsed().saturating_sub(checking);
        match received {
            Ok(Received::Whole(reply)) => {
                Self::judge_whole(run, number, reply, runner_time, checking).await
            }
            Ok(Received::Cut {
                reply,
                issues,
                deltas,
            }) => {
                let cut = Cut {
                    bytes: reply.text.len(),
                    codes: error_codes(&issues)
                        .into_iter()
                        .map(str::to_string)
                        .collect(),
                };
                let timing = (runner_time, checking);
                let sent = asking.sent_bytes();
                Ok(Self::record_cut(
                    run, number, reply, issues, cut, deltas, sent, timing,
                ))
            }
            Err(error) => Err(Self::runner_failed(
                run,
                number,
                error,
                runner_time,
                checking,
            )),
        }
    }

    /// What attempt `number` sends ([`ask_for`](Self::ask_for)), with the free call of a
    /// reason-then-format attempt made; a failed free call is the attempt's failure.
    async fn prepare<'r, 'p>(
        &self,
        runner: &dyn Runner,
        request: &'r Request,
        run: &mut Run<'_>,
        number: u32,
        previous: Option<&'p Previous>,
    ) -> Result<Asking<'r, 'p>, NoAnswer> {
        match self.ask_for(request, run, number, previous) {
            Planned::Ready(asking) => Ok(asking),
            Planned::ReasonFirst(two) => match Self::reason_first(run, runner, *two).await {
                Ok(format) => Ok(Asking::Fresh(Cow::Owned(format))),
                Err((error, took)) => Err(Self::runner_failed(
                    run,
                    number,
                    error,
                    took,
                    Duration::ZERO,
                )),
            },
        }
    }

    /// Records attempt `number` as one the runner failed.
    fn runner_failed(
        run: &mut Run<'_>,
        number: u32,
        error: RunnerError,
        runner_time: Duration,
        checking: Duration,
    ) -> NoAnswer {
        run.spent.runner += runner_time;
        let mut attempt =
            Run::attempt(number, &Reply::default(), Vec::new(), runner_time, checking);
        attempt.runner_error = Some(error.clone());
        run.push_attempt(attempt);
        NoAnswer::RunnerFailed(error)
    }

    /// The free call of a reason-then-format attempt, asked whole and not validated: its
    /// usage counts in the run's spend and the attempt's. Returns the format call, which
    /// carries the free answer; or the runner's error and the time it took.
    async fn reason_first(
        run: &mut Run<'_>,
        runner: &dyn Runner,
        two: TwoPass,
    ) -> Result<Request, (RunnerError, Duration)> {
        let started = Instant::now();
        let free = runner.ask(Ask::new(&two.free)).reply().await;
        let took = started.elapsed();
        let free = free.map_err(|error| (error, took))?;
        run.spent.add(&free, took);
        run.asked.free_answer = Some(FreeAnswer {
            response_bytes: free.text.len(),
            runner_us: micros(took),
            usage: free.usage,
            cost_usd: free.cost_usd,
        });
        let mut format = two.format;
        format.messages.push(Message::assistant(free.text));
        format.messages.push(Message::user(two.instruction));
        Ok(format)
    }

    /// What attempt `number` sends: the request with this attempt's seed (every re-ask draws
    /// anew), as a first ask, or a re-ask about `previous`: with more room after a truncated
    /// answer, else the way the ladder's next rung asks. Notes on `run` how it asked.
    fn ask_for<'r, 'p>(
        &self,
        request: &'r Request,
        run: &mut Run<'_>,
        number: u32,
        previous: Option<&'p Previous>,
    ) -> Planned<'r, 'p> {
        let Some(previous) = previous else {
            return self.first_ask(request, run);
        };
        let mut asking = reseeded(request, number);
        let seed = seed_of(&asking);
        if previous.reply.finish_reason == Some(FinishReason::Length) {
            // Not a rung's attempt: the constraint waits for its rung.
            if self.constrains_its_rung_only() {
                asking = without_constraint(asking);
            }
            let more_room = self.more_room(&mut asking, &previous.reply, &run.spent);
            asking.messages.push(Message::user(SHORTER));
            run.asked = Asked {
                seed,
                more_room,
                ..Asked::default()
            };
            return Planned::Ready(Asking::Fresh(Cow::Owned(asking)));
        }
        let (reask, choice) = self.strategy_for(request, run, number, &previous.found.issues);
        run.asked = Asked {
            seed,
            reask: Some(reask),
            choice,
            ..Asked::default()
        };
        self.by_rung(reask, asking, run, previous)
    }

    /// The first attempt: the request as it is, its two calls with reason-then-format, or
    /// without its decoding constraint when the ladder keeps that for the rung `constrained`.
    fn first_ask<'r, 'p>(&self, request: &'r Request, run: &mut Run<'_>) -> Planned<'r, 'p> {
        run.asked = Asked {
            seed: seed_of(request),
            ..Asked::default()
        };
        if self.policy.first_attempt == FirstAttempt::ReasonThenFormat {
            return Planned::ReasonFirst(Box::new(TwoPass::of(request.clone(), None)));
        }
        if self.constrains_its_rung_only() && !request.constraint_params.is_empty() {
            let free = without_constraint(request.clone());
            return Planned::Ready(Asking::Fresh(Cow::Owned(free)));
        }
        Planned::Ready(Asking::Fresh(Cow::Borrowed(request)))
    }

    /// How rung `reask` asks again about `previous`, from `asking` (the request with this
    /// attempt's seed).
    fn by_rung<'r, 'p>(
        &self,
        reask: Reask,
        mut asking: Request,
        run: &mut Run<'_>,
        previous: &'p Previous,
    ) -> Planned<'r, 'p> {
        // Reason-then-format leaves the constraint out of its free call and keeps it for the
        // format call, whatever the ladder.
        let answers_freely = !matches!(reask, Reask::Constrained | Reask::ReasonThenFormat);
        if answers_freely && self.constrains_its_rung_only() {
            asking = without_constraint(asking);
        }
        let asking = match reask {
            Reask::Feedback => Asking::FollowUp {
                request: asking,
                previous,
            },
            Reask::Resample => Asking::Fresh(Cow::Owned(asking)),
            Reask::FeedbackFresh => {
                asking.messages.push(Message::user(&previous.feedback));
                Asking::Fresh(Cow::Owned(asking))
            }
            Reask::ReasonThenFormat => {
                let two = TwoPass::of(asking, Some(&previous.feedback));
                return Planned::ReasonFirst(Box::new(two));
            }
            Reask::Escalate => {
                self.escalate(run);
                Asking::FollowUp {
                    request: asking,
                    previous,
                }
            }
            Reask::Constrained => {
                if asking.constraint_params.is_empty() {
                    warn_once(
                        run,
                        CONSTRAINT_UNAVAILABLE,
                        "The re-ask strategy `constrained` had no decoding constraint to send \
                         (the contract gives none, or the runner cannot take one); the re-ask \
                         resampled without one.",
                    );
                }
                Asking::Fresh(Cow::Owned(asking))
            }
        };
        Planned::Ready(asking)
    }

    /// Whether the request's decoding constraint goes only with the rung `constrained`'s
    /// attempts: when the ladder has that rung, or `reask: auto` may take it, the others
    /// answer freely.
    fn constrains_its_rung_only(&self) -> bool {
        self.policy.reask.rungs().contains(&Reask::Constrained) || self.auto_may_constrain()
    }

    /// Notes on `run` that this re-ask goes to the escalation model; without one, the
    /// outcome's warning that it went to the main runner.
    fn escalate(&self, run: &mut Run<'_>) {
        if self.escalation.is_some() {
            run.asked.escalated = true;
        } else {
            warn_once(
                run,
                ESCALATION_NO_TARGET,
                "The re-ask strategy `escalate` has no escalation model (`escalate_to`); the \
                 re-ask went to the main model, with feedback.",
            );
        }
    }

    /// Raises the token limit of `asking` (a re-ask after `truncated` hit it) to twice the
    /// limit it hit, within what the token budget has left (never below the old limit).
    /// Returns the new limit; `None` when the old one is unknown (no limit in the request and
    /// no usage reported), and then the limit stays as it was.
    fn more_room(&self, asking: &mut Request, truncated: &Reply, spent: &Spent) -> Option<u64> {
        let key = match (
            asking.params.contains_key("max_tokens"),
            asking.params.contains_key("max_completion_tokens"),
        ) {
            (false, true) => "max_completion_tokens",
            _ => "max_tokens",
        };
        let hit = asking
            .params
            .get(key)
            .and_then(serde_json::Value::as_u64)
            .or(truncated.usage.map(|u| u.output_tokens))
            .filter(|limit| *limit > 0)?;
        let left = match (self.policy.budget.max_tokens, spent.usage) {
            (Some(max), Some(used)) => max.saturating_sub(used.total()),
            (Some(max), None) => max,
            (None, _) => u64::MAX,
        };
        let room = hit.saturating_mul(2).min(left).max(hit);
        asking.params.insert(key.to_string(), room.into());
        Some(room)
    }

    /// Validates a whole answer and records it; a length-limited answer gets its `TRUNCATED`
    /// issue.
    async fn judge_whole(
        run: &mut Run<'_>,
        number: u32,
        reply: Reply,
        runner_time: Duration,
        checking: Duration,
    ) -> Result<Answer, NoAnswer> {
        run.spent.add(&reply, runner_time);
        let validating = Instant::now();
        let verdict = run.validate(&reply, number, false).await;
        let validation_time = validating.elapsed().saturating_add(checking);
        let mut found = match verdict {
            Verdict::Found(found) => found,
            Verdict::Unavailable(unavailable) => {
                run.record(number, &reply, Vec::new(), runner_time, validation_time);
                return Err(NoAnswer::Unavailable { reply, unavailable });
            }
        };
        if reply.finish_reason == Some(FinishReason::Length) {
            let fails = found.issues.iter().any(Issue::is_error);
            found.insert_first(truncated(fails));
        }
        run.observer.on_event(&Event::Validated {
            attempt: number,
            response: &reply.text,
            issues: &found.issues,
        });
        let issues = found.issues.clone();
        run.record(number, &reply, issues, runner_time, validation_time);
        Ok(Answer {
            reply,
            found,
            cut: false,
        })
    }

    /// Records an answer cut short while it streamed. Its usage report would have come at the
    /// stream's end, which a cut never reaches: what was received is counted instead.
    #[allow(clippy::too_many_arguments)]
    fn record_cut(
        run: &mut Run<'_>,
        number: u32,
        mut reply: Reply,
        issues: Vec<Issue>,
        cut: Cut,
        deltas: u64,
        sent_bytes: usize,
        (runner_time, checking): (Duration, Duration),
    ) -> Answer {
        let estimated = reply.usage.is_none();
        if estimated {
            reply.usage = Some(Usage {
                input_tokens: u64::try_from(sent_bytes.div_ceil(4)).unwrap_or(u64::MAX),
                output_tokens: deltas,
            });
        }
        run.spent.add(&reply, runner_time);
        run.observer.on_event(&Event::Cut {
            attempt: number,
            bytes: reply.text.len(),
            issues: &issues,
        });
        let mut attempt = Run::attempt(number, &reply, issues.clone(), runner_time, checking);
        attempt.usage_estimated = estimated;
        attempt.cut = Some(cut);
        run.push_attempt(attempt);
        // A cut answer is never repaired: the issues belong to no leaf's repair.
        Answer {
            reply,
            found: Found::unattributed(issues),
            cut: true,
        }
    }

    /// During a re-ask, a failure another call may not meet is a failed attempt: ask again
    /// (about the same previous answer) while attempts and budgets allow. A failed first ask
    /// ends the loop: the runner's own retries were spent on it, and retrying a failing
    /// upstream from here too would multiply the load on it.
    fn asks_again_after(
        &self,
        run: &Run<'_>,
        number: u32,
        reasking: bool,
        error: &RunnerError,
    ) -> bool {
        reasking
            && error.is_transient()
            && number < self.max_attempts()
            && self.budget_spent(number, &run.spent, run.started).is_none()
    }

    /// Why the run ends after `answer` (attempt `number`), if it does.
    fn stop_rule(
        &self,
        run: &Run<'_>,
        number: u32,
        answer: &Answer,
        previous: Option<&Previous>,
    ) -> Option<StopReason> {
        let issues = &answer.found.issues;
        let errors = error_set(issues);
        if errors.is_empty() {
            return Some(StopReason::Clean);
        }
        if issues.iter().any(|i| i.is_error() && !i.repairable) {
            return Some(StopReason::HardAbort);
        }
        if number > self.policy.retries_allowed(issues) {
            return Some(StopReason::RetriesExhausted);
        }
        // No progress ends the loop once every rung of the ladder was tried (unless the
        // policy makes every attempt); before that, the next re-ask climbs to the next rung.
        let out_of_rungs = run.rungs_used >= self.policy.reask.rungs().len();
        if self.policy.stop_on_no_progress
            && out_of_rungs
            && no_progress(run, answer, &errors, previous)
        {
            return Some(StopReason::NoProgress);
        }
        self.budget_spent(number, &run.spent, run.started)
            .map(|budget| StopReason::Budget { budget })
    }

    /// Ends the run on `answer` for `reason`: passes it, or repairs and concludes. The part
    /// of a cut answer is never the answer: the last whole one is.
    async fn stop(run: Run<'_>, reason: StopReason, number: u32, answer: Answer) -> crate::Outcome {
        if answer.cut {
            return Box::pin(run.conclude_on(reason)).await;
        }
        if matches!(reason, StopReason::Clean) {
            return run.passed(reason, answer.reply, answer.found.issues);
        }
        Box::pin(run.conclude(reason, number, answer.reply, answer.found, true)).await
    }

    /// The feedback about a failed `answer` that the next attempt sends; tells the observer a
    /// re-ask follows.
    async fn reask_about(&self, run: &mut Run<'_>, number: u32, answer: Answer) -> Previous {
        let Answer { reply, found, cut } = answer;
        let issues = &found.issues;
        let feedback = if cut {
            let missing = run.still_missing(&reply, issues).await;
            self.policy
                .feedback
                .build_after_cut(issues, &missing, &reply.text)
        } else {
            self.policy.feedback.build_for_answer(issues, &reply.text)
        };
        run.observer.on_event(&Event::Retrying {
            attempt: number.saturating_add(1),
            max_attempts: self.max_attempts(),
            issues,
            feedback: &feedback,
        });
        if !cut {
            run.reasked.push((number, reply.clone(), found.clone()));
        }
        Previous {
            reply,
            found,
            feedback,
        }
    }
}
