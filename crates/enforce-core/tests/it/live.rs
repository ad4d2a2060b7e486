//! `reask: auto` over live statistics: the outcomes a chooser is told of add to the counts
//! it chooses by, so its choice follows them; replicas' shared counts replace the local ones
//! without losing what was recorded since they were last shared.

use crate::auto::{key, tally_of};
use crate::req;
use crate::seeds::NeedsTitle;
use enforce_core::policy::{AutoReask, Reask};
use enforce_core::strategy::{
    ChoiceInput, LiveChooser, LiveStats, ReaskChooser, StrategyStats, ThompsonSettings,
};
use enforce_core::{Context, Enforcer, Policy, ScriptedRunner, Status};
use std::sync::Arc;

const BOTH: [Reask; 2] = [Reask::Feedback, Reask::Resample];

fn by_means() -> ThompsonSettings {
    let mut settings = ThompsonSettings::default();
    settings.explore = false;
    settings.min_attempts = 1;
    settings
}

fn choice(chooser: &LiveChooser) -> Reask {
    chooser
        .choose(&ChoiceInput::new(&["NO_TITLE"], &BOTH, Reask::Feedback))
        .strategy
}

/// One request whose first answer lacks a title and whose re-ask (by the chooser) passes.
async fn one_request(chooser: Arc<LiveChooser>) -> enforce_core::Outcome {
    let policy = Policy::builder()
        .max_retries(1)
        .reask(Reask::Feedback)
        .reask_auto(AutoReask::among(BOTH))
        .build();
    let runner = ScriptedRunner::texts(["no", "a title"]);
    Enforcer::new(vec![Box::new(NeedsTitle)])
        .with_policy(policy)
        .with_chooser(chooser)
        .run(&runner, &req(), &Context::new())
        .await
}

#[tokio::test]
async fn recorded_outcomes_change_the_choice() {
    // Feedback looks better at first: 1 of 2 against 0 of 2.
    let mut initial = StrategyStats::default();
    initial.add(key("NO_TITLE", Reask::Feedback), tally_of(2, 1, 100));
    initial.add(key("NO_TITLE", Reask::Resample), tally_of(2, 0, 100));
    let live = Arc::new(LiveStats::new(initial));
    let chooser = Arc::new(LiveChooser::new(live.clone(), "m", "p", by_means()));
    assert_eq!(choice(&chooser), Reask::Feedback);

    let outcome = one_request(chooser.clone()).await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    assert_eq!(outcome.attempts[1].reask, Some(Reask::Feedback));
    chooser.record(&outcome);
    let feedback = *live
        .snapshot()
        .get(&key("NO_TITLE", Reask::Feedback))
        .expect("counted");
    assert_eq!((feedback.attempts, feedback.valid), (3, 2));

    // Resample's fixes arrive (another replica's, say): the choice follows them.
    let mut shared = live.snapshot();
    shared.add(key("NO_TITLE", Reask::Resample), tally_of(10, 10, 100));
    live.set_shared(shared);
    assert_eq!(choice(&chooser), Reask::Resample);
}

#[tokio::test]
async fn shared_counts_keep_what_was_recorded_since_they_were_taken() {
    let live = Arc::new(LiveStats::new(StrategyStats::default()));
    let chooser = Arc::new(LiveChooser::new(live.clone(), "m", "p", by_means()));
    chooser.record(&one_request(chooser.clone()).await);
    let taken = live.take_unshared();
    assert_eq!(taken, live.snapshot());
    assert!(live.take_unshared().is_empty(), "taken once");

    // Recorded after the counts were taken, before the shared ones are read back.
    chooser.record(&one_request(chooser.clone()).await);
    let mut shared = taken.clone();
    shared.add(key("NO_TITLE", Reask::Resample), tally_of(4, 4, 100));
    live.set_shared(shared);
    let now = live.snapshot();
    let fallback = now.get(&key("NO_TITLE", Reask::Feedback)).expect("counted");
    assert_eq!(fallback.attempts, 2, "both requests' re-asks: {now:?}");
    assert_eq!(
        now.get(&key("NO_TITLE", Reask::Resample))
            .map(|t| t.attempts),
        Some(4)
    );

    // Counts that could not be shared are taken again next time.
    let unsent = live.take_unshared();
    live.return_unshared(&unsent);
    assert_eq!(live.take_unshared(), unsent);
}
