//! The one check of a run's event stream, for every test that reads one (a library
//! subscriber, `--events`, `show --follow --json`, the web view's API, a run on Restate):
//! events as JSON, as each of those writes them.

use serde_json::Value;

/// Asserts that `events` are one whole run of `thread_id`: numbered from 1 without holes or
/// repeats, no gap marker, `run_started` first and `run_finished` last and once — and, when
/// `leaves` is given, each of that many leaves (call ids 1 to `leaves`) started and finished
/// exactly once. Returns the events' types, in order, for the test's own checks.
pub fn assert_one_run<'a>(
    events: &'a [Value],
    thread_id: &str,
    leaves: Option<u64>,
) -> Vec<&'a str> {
    let seqs: Vec<u64> = events
        .iter()
        .map(|event| event["seq"].as_u64().expect("every event has a seq"))
        .collect();
    assert_eq!(
        seqs,
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "the events are not numbered from 1 without holes: {events:#?}"
    );
    assert!(
        events.iter().all(|event| event["thread_id"] == thread_id),
        "an event of another thread than {thread_id}: {events:#?}"
    );
    let kinds: Vec<&str> = events
        .iter()
        .map(|event| event["type"].as_str().expect("every event has a type"))
        .collect();
    assert!(!kinds.contains(&"gap"), "a gap marker: {kinds:?}");
    assert_eq!(kinds.first(), Some(&"run_started"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"run_finished"), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|kind| **kind == "run_finished").count(),
        1,
        "{kinds:?}"
    );
    if let Some(leaves) = leaves {
        for kind in ["leaf_started", "leaf_finished"] {
            let mut calls: Vec<u64> = events
                .iter()
                .filter(|event| event["type"] == kind)
                .map(|event| {
                    event["call_id"]
                        .as_u64()
                        .expect("a leaf event has a call id")
                })
                .collect();
            calls.sort_unstable();
            assert_eq!(
                calls,
                (1..=leaves).collect::<Vec<_>>(),
                "each leaf's {kind} once: {kinds:?}"
            );
        }
    }
    kinds
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn run(kinds: &[&str]) -> Vec<Value> {
        kinds
            .iter()
            .enumerate()
            .map(|(at, kind)| json!({"thread_id": "t", "seq": at + 1, "type": kind, "call_id": 1}))
            .collect()
    }

    #[test]
    fn a_whole_run_passes() {
        let events = run(&[
            "run_started",
            "leaf_started",
            "leaf_finished",
            "run_finished",
        ]);
        assert_eq!(assert_one_run(&events, "t", Some(1)).len(), 4);
    }

    #[test]
    #[should_panic(expected = "without holes")]
    fn a_hole_fails() {
        let mut events = run(&["run_started", "log", "run_finished"]);
        events.remove(1);
        assert_one_run(&events, "t", None);
    }

    #[test]
    #[should_panic(expected = "gap marker")]
    fn a_gap_marker_fails() {
        assert_one_run(&run(&["run_started", "gap", "run_finished"]), "t", None);
    }

    #[test]
    #[should_panic(expected = "each leaf")]
    fn a_leaf_finished_twice_fails() {
        let events = run(&[
            "run_started",
            "leaf_started",
            "leaf_finished",
            "leaf_finished",
            "run_finished",
        ]);
        assert_one_run(&events, "t", Some(1));
    }
}
