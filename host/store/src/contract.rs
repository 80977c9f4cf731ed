//! The behaviour every `CheckpointStore` must have, run against each implementation.

use serde_json::{Value, json};

use super::*;

pub(crate) fn header(thread_id: &str) -> ThreadHeader {
    ThreadHeader {
        thread_id: thread_id.into(),
        script: "return 1".into(),
        script_sha256: "s".repeat(64),
        args: json!({"a": 1}),
        args_sha256: "a".repeat(64),
        start_unix_nanos: 1_700_000_000_000_000_000,
        limits: json!({"fuel": 5}),
        guard: true,
        created_unix_ms: 1_700_000_000_000,
    }
}

pub(crate) fn entry(seq: u64, batch: u64) -> Entry {
    Entry {
        seq,
        batch,
        handle: seq + 1,
        fingerprint: format!("{seq:064x}"),
        request: CallRequest::Agent(AgentRequest {
            prompt: json!(format!("p{seq}")),
            schema: (seq % 2 == 1).then(|| json!({"type": "string"})),
            agent_type: None,
            label: Some(format!("leaf {seq}")),
            instruction: None,
            model: None,
            tools: Some(vec![]),
            instance_id: None,
        }),
        outcome: if seq % 3 == 2 {
            EntryOutcome::Err {
                kind: CallErrorKind::AgentFailed,
                message: "boom".into(),
                retryable: false,
                cause: None,
            }
        } else {
            EntryOutcome::Ok {
                value: format!("\"reply {seq}\""),
            }
        },
        input_tokens: 10,
        output_tokens: 5,
        // Odd entries' counts are estimates, so every store keeps both kinds.
        estimated_tokens: if seq % 2 == 1 { 15 } else { 0 },
        duration_ms: 3,
    }
}

pub(crate) fn outcome(result: Result<Value, ErrorInfo>) -> RecordedOutcome {
    let mut summary = Summary::new("t");
    summary.leaves = 3;
    summary.duration_ms = 250;
    // A sum of prices that is not a short decimal: listings must give it to the bit.
    summary.cost_usd = Some(0.1 + 0.2);
    RecordedOutcome { result, summary }
}

pub(crate) async fn round_trip(store: &dyn CheckpointStore) {
    store.begin(&header("t1")).await.unwrap();
    assert!(matches!(
        store.begin(&header("t1")).await,
        Err(StoreError::ThreadExists(_))
    ));
    store.set_name("t1", "review").await.unwrap();
    store
        .append("t1", &[entry(0, 0), entry(1, 0)])
        .await
        .unwrap();
    store.append("t1", &[entry(2, 1)]).await.unwrap();
    let err = store.append("t1", &[entry(5, 2)]).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::OutOfOrder {
                expected: 3,
                got: 5,
                ..
            }
        ),
        "{err}"
    );
    let run = store.load("t1").await.unwrap().unwrap();
    assert_eq!(run.header, header("t1"));
    assert_eq!(run.name.as_deref(), Some("review"));
    assert_eq!(run.entries, vec![entry(0, 0), entry(1, 0), entry(2, 1)]);
    assert_eq!(run.status, ThreadStatus::Resumable, "no run holds it");
    // One completion by its call, and the thread without its completions.
    assert_eq!(store.entry("t1", 2).await.unwrap(), Some(entry(1, 0)));
    assert_eq!(store.entry("t1", 9).await.unwrap(), None);
    assert_eq!(store.entry("nope", 1).await.unwrap(), None);
    assert_eq!(store.entry("t1", u64::MAX).await.unwrap(), None);
    let overview = store.overview("t1").await.unwrap().unwrap();
    assert_eq!(overview.header, header("t1"));
    assert_eq!(overview.end, None);
    let summary = &overview.summary;
    assert_eq!(
        (summary.name.as_deref(), summary.status, summary.leaves),
        (Some("review"), ThreadStatus::Resumable, 3)
    );
    assert_eq!((summary.tokens, summary.finished_unix_ms), (45, None));
    assert!(store.overview("nope").await.unwrap().is_none());
    let claim = store.claim("t1").await.unwrap();
    assert_eq!(
        store.load("t1").await.unwrap().unwrap().status,
        ThreadStatus::Running
    );
    assert_eq!(
        store.status("t1").await.unwrap(),
        Some(ThreadStatus::Running)
    );
    assert_eq!(
        store.overview("t1").await.unwrap().unwrap().summary.status,
        ThreadStatus::Running
    );
    let listed = store.list().await.unwrap().threads;
    assert_eq!(listed[0].status, ThreadStatus::Running);
    assert_eq!(
        (listed[0].finished_unix_ms, listed[0].cost_usd),
        (None, None)
    );
    drop(claim);
    assert_eq!(
        store.status("t1").await.unwrap(),
        Some(ThreadStatus::Resumable)
    );

    let end = ThreadEnd {
        outcome: outcome(Ok(json!(1))),
        finished_unix_ms: 1_700_000_000_500,
    };
    store.finish("t1", &end).await.unwrap();
    assert_eq!(
        store.load("t1").await.unwrap().unwrap().end,
        Some(end.clone())
    );
    assert!(matches!(
        store.append("t1", &[entry(3, 2)]).await,
        Err(StoreError::Finished(_))
    ));
    assert!(matches!(
        store.finish("t1", &end).await,
        Err(StoreError::Finished(_))
    ));
    assert!(matches!(
        store.finish("nope", &end).await,
        Err(StoreError::UnknownThread(_))
    ));
    assert!(store.load("nope").await.unwrap().is_none());
    assert!(matches!(
        store.append("nope", &[entry(0, 0)]).await,
        Err(StoreError::UnknownThread(_))
    ));

    for (conversation, thread, ok) in [("c1", "w1", true), ("c2", "w2", false), ("c1", "w3", true)]
    {
        let record = WorkflowRecord {
            conversation_id: conversation.into(),
            thread_id: thread.into(),
            name: Some("review".into()),
            leaves: 4,
            tokens: 100,
            ok,
            recorded_unix_ms: 1_700_000_000_000,
        };
        store.record_workflow(&record).await.unwrap();
    }
    let c1 = store.workflows(Some("c1")).await.unwrap();
    assert_eq!(
        c1.iter().map(|r| r.thread_id.as_str()).collect::<Vec<_>>(),
        ["w1", "w3"]
    );
    let all = store.workflows(None).await.unwrap();
    assert_eq!(
        WorkflowTotals::of(&all),
        WorkflowTotals {
            runs: 3,
            failed: 1,
            leaves: 12,
            tokens: 300
        }
    );

    let mut later = header("t2");
    later.created_unix_ms += 10;
    store.begin(&later).await.unwrap();
    let listing = store.list().await.unwrap();
    assert!(listing.damaged.is_empty());
    let listing = listing.threads;
    assert_eq!(listing.len(), 2);
    assert_eq!(listing[0].thread_id, "t2");
    assert_eq!(
        listing[1],
        ThreadSummary {
            thread_id: "t1".into(),
            name: Some("review".into()),
            status: ThreadStatus::Succeeded,
            leaves: 3,
            tokens: 45,
            cost_usd: Some(0.30000000000000004),
            created_unix_ms: 1_700_000_000_000,
            finished_unix_ms: Some(1_700_000_000_500),
            duration_ms: 250,
        }
    );
    let finished = store.load("t1").await.unwrap().unwrap();
    assert_eq!(finished.status, ThreadStatus::Succeeded);
    assert_eq!(ThreadSummary::of(&finished, 0), listing[1]);
    let overview = store.overview("t1").await.unwrap().unwrap();
    assert_eq!(
        (overview.summary, overview.end),
        (listing[1].clone(), Some(end))
    );
    assert_eq!(listing[0].status, ThreadStatus::Resumable);
    assert_eq!(listing[0].finished_unix_ms, None);
}

pub(crate) fn event(seq: u64) -> StoredEvent {
    StoredEvent {
        seq,
        kind: "log".into(),
        event: format!(r#"{{"thread_id":"e1","seq":{seq},"type":"log","message":"n {seq}"}}"#),
    }
}

pub(crate) async fn events_round_trip(store: &dyn CheckpointStore) {
    assert!(matches!(
        store.append_events("e1", &[event(1)]).await,
        Err(StoreError::UnknownThread(_))
    ));
    store.begin(&header("e1")).await.unwrap();
    store.begin(&header("e2")).await.unwrap();
    assert_eq!(store.last_event_seq("e1").await.unwrap(), 0);
    assert_eq!(
        store.status("e1").await.unwrap(),
        Some(ThreadStatus::Resumable)
    );
    assert_eq!(store.status("nope").await.unwrap(), None);
    store
        .append_events("e1", &[event(1), event(2)])
        .await
        .unwrap();
    store.append_events("e1", &[]).await.unwrap();
    store.append_events("e1", &[event(3)]).await.unwrap();
    let err = store.append_events("e1", &[event(5)]).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::OutOfOrder {
                expected: 4,
                got: 5,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(store.last_event_seq("e1").await.unwrap(), 3);
    assert_eq!(
        store.events("e1", 0, 100).await.unwrap(),
        vec![event(1), event(2), event(3)]
    );
    assert_eq!(store.events("e1", 1, 1).await.unwrap(), vec![event(2)]);
    assert!(store.events("e1", 3, 10).await.unwrap().is_empty());
    assert!(store.events("e2", 0, 10).await.unwrap().is_empty());
    assert!(store.events("nope", 0, 10).await.unwrap().is_empty());
    // The events of one call: those whose JSON has its `call_id`, and any that is not JSON.
    let about = |seq: u64, call_id: u64| StoredEvent {
        seq,
        kind: "leaf_started".into(),
        event: format!(
            r#"{{"thread_id":"e2","seq":{seq},"type":"leaf_started","call_id":{call_id}}}"#
        ),
    };
    let damaged = StoredEvent {
        seq: 6,
        kind: "leaf_finished".into(),
        event: r#"{"thread_id":"e2","call_id":"#.into(),
    };
    let mut log = event(3);
    log.event = log.event.replace("\"message\"", "\"call\":7,\"message\"");
    store
        .append_events(
            "e2",
            &[
                about(1, 7),
                about(2, 8),
                log,
                about(4, 7),
                about(5, 70),
                damaged.clone(),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        store.call_events("e2", 7, 0, 10).await.unwrap(),
        vec![about(1, 7), about(4, 7), damaged.clone()]
    );
    assert_eq!(
        store.call_events("e2", 7, 1, 1).await.unwrap(),
        vec![about(4, 7)]
    );
    assert_eq!(
        store.call_events("e2", 9, 0, 10).await.unwrap(),
        vec![damaged]
    );
    assert!(store.call_events("e2", 7, 6, 10).await.unwrap().is_empty());
    assert!(store.call_events("e1", 7, 0, 10).await.unwrap().is_empty());
    assert!(
        store
            .call_events("nope", 7, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // A finished thread still takes its run's last events.
    let end = ThreadEnd {
        outcome: outcome(Ok(json!(1))),
        finished_unix_ms: 1,
    };
    store.finish("e1", &end).await.unwrap();
    store.append_events("e1", &[event(4)]).await.unwrap();
    assert_eq!(
        store.status("e1").await.unwrap(),
        Some(ThreadStatus::Succeeded)
    );
    assert_eq!(store.last_event_seq("e1").await.unwrap(), 4);
}

/// How a run ends: its last events and its end written together, or neither.
pub(crate) async fn finishing_writes_the_last_events_with_the_end(store: &dyn CheckpointStore) {
    let end = ThreadEnd {
        outcome: outcome(Ok(json!(1))),
        finished_unix_ms: 1,
    };
    assert!(matches!(
        store.finish_with_events("f0", &[event(1)], &end).await,
        Err(StoreError::UnknownThread(_))
    ));
    store.begin(&header("f1")).await.unwrap();
    store.append_events("f1", &[event(1)]).await.unwrap();
    // Events out of order write nothing, not even the end.
    let err = store
        .finish_with_events("f1", &[event(3)], &end)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::OutOfOrder {
                expected: 2,
                got: 3,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        store.status("f1").await.unwrap(),
        Some(ThreadStatus::Resumable)
    );
    assert_eq!(store.last_event_seq("f1").await.unwrap(), 1);
    store
        .finish_with_events("f1", &[event(2), event(3)], &end)
        .await
        .unwrap();
    assert_eq!(
        store.status("f1").await.unwrap(),
        Some(ThreadStatus::Succeeded)
    );
    assert_eq!(
        store.load("f1").await.unwrap().unwrap().end,
        Some(end.clone())
    );
    assert_eq!(
        store.events("f1", 0, 10).await.unwrap(),
        vec![event(1), event(2), event(3)]
    );
    // A thread ends once: a second end writes neither.
    assert!(matches!(
        store.finish_with_events("f1", &[event(4)], &end).await,
        Err(StoreError::Finished(_))
    ));
    assert_eq!(store.last_event_seq("f1").await.unwrap(), 3);
    // With no events it is `finish`.
    store.begin(&header("f2")).await.unwrap();
    store.finish_with_events("f2", &[], &end).await.unwrap();
    assert_eq!(
        store.status("f2").await.unwrap(),
        Some(ThreadStatus::Succeeded)
    );
}

pub(crate) async fn claims_are_exclusive(store: &dyn CheckpointStore) {
    let first = store.claim("c1").await.unwrap();
    let err = store.claim("c1").await.unwrap_err();
    assert!(matches!(&err, StoreError::InUse { thread_id, .. } if thread_id == "c1"));
    assert!(
        err.to_string().contains("wait for that run to end"),
        "{err}"
    );
    // Other threads are not held up, and a thread that does not exist yet can be claimed.
    let other = store.claim("c2").await.unwrap();
    drop(first);
    let again = store.claim("c1").await.unwrap();
    drop((again, other));
    // Finishing a thread while it is claimed is the normal end of a run.
    store.begin(&header("c3")).await.unwrap();
    let held = store.claim("c3").await.unwrap();
    let end = ThreadEnd {
        outcome: outcome(Ok(json!(true))),
        finished_unix_ms: 1,
    };
    store.finish("c3", &end).await.unwrap();
    drop(held);
    let _after = store.claim("c3").await.unwrap();
}

pub(crate) async fn recent_replies_are_the_newest_successful_leaves(store: &dyn CheckpointStore) {
    assert!(store.recent_replies(10).await.unwrap().is_empty());
    let mut old = header("r-old");
    old.created_unix_ms -= 10;
    store.begin(&old).await.unwrap();
    store.begin(&header("r-new")).await.unwrap();
    let with_tokens = |seq: u64, tokens: u64| Entry {
        output_tokens: tokens,
        ..entry(seq, 0)
    };
    store
        .append("r-old", &[with_tokens(0, 100), with_tokens(1, 110)])
        .await
        .unwrap();
    // Entry 2 failed and entry 3 is a tool call: neither is a leaf's reply.
    let tool = Entry {
        request: CallRequest::Tool(ToolRequest {
            name: "echo".into(),
            arguments: json!({}),
        }),
        ..with_tokens(3, 230)
    };
    let new = [
        with_tokens(0, 200),
        with_tokens(1, 210),
        with_tokens(2, 220),
        tool,
    ];
    store.append("r-new", &new).await.unwrap();
    let replies = store.recent_replies(10).await.unwrap();
    let seen: Vec<(Option<&str>, bool, u64)> = replies
        .iter()
        .map(|r| (r.label.as_deref(), r.schema.is_some(), r.output_tokens))
        .collect();
    assert_eq!(
        seen,
        [
            (Some("leaf 0"), false, 200),
            (Some("leaf 1"), true, 210),
            (Some("leaf 0"), false, 100),
            (Some("leaf 1"), true, 110),
        ]
    );
    assert_eq!(replies[1].schema, Some(json!({"type": "string"})));
    assert_eq!((&replies[0].model, &replies[0].agent_type), (&None, &None));
    let newest = store.recent_replies(1).await.unwrap();
    assert_eq!(newest, replies[..1]);
    assert!(store.recent_replies(0).await.unwrap().is_empty());
}
