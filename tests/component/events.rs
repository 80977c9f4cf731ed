//! The live event stream of a real run: order, completeness and the group tree.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flowbox::backends::FakeBackend;
use flowbox::store::{CheckpointStore, GroupKind, MemoryStore};
use flowbox::{
    BackendError, Event, EventKind, EventStream, LeafBackend, LeafObserver, LeafReply, LeafRequest,
    Position, RunRequest, Runtime,
};
use flowbox_testkit::events::assert_one_run;
use flowbox_tests::{CountingBackend, root, runtime};
use serde_json::json;
use tokio::sync::Notify;

/// Runs `script` under `thread` and returns every event it published, in order.
async fn events_of(runtime: &Runtime, thread: &str, script: &str) -> Vec<Event> {
    let mut stream = runtime.subscribe();
    let outcome = runtime
        .run_request(RunRequest::new(script).thread_id(thread))
        .await;
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    let mut events = Vec::new();
    while let Some(event) = stream.recv().await {
        assert!(!matches!(event.kind, EventKind::Gap { .. }), "lost events");
        if event.thread_id != thread {
            continue;
        }
        let last = matches!(event.kind, EventKind::RunFinished { .. });
        events.push(event);
        if last {
            break;
        }
    }
    events
}

#[tokio::test]
async fn a_run_publishes_a_complete_ordered_stream() {
    let rt = runtime();
    let events = events_of(
        &rt,
        "events-order",
        r#"
meta = {"name": "ev", "description": "d", "phases": [{"title": "fan", "detail": "out"}]}
async def main():
    phase("fan")
    await parallel([lambda i=i: agent(f"p{i}", label=f"l{i}") for i in range(100)])
    log("done")
    return 1
"#,
    )
    .await;
    let as_json: Vec<serde_json::Value> = events
        .iter()
        .map(|event| serde_json::to_value(event).unwrap())
        .collect();
    assert_one_run(&as_json, "events-order", Some(100));
    assert_eq!(
        events[0].kind,
        EventKind::RunStarted {
            name: Some("ev".into()),
            phases: vec![flowbox::MetaPhase {
                title: "fan".into(),
                detail: Some("out".into())
            }],
        }
    );
    assert_eq!(
        events[1].kind,
        EventKind::Phase {
            title: "fan".into()
        }
    );
    let mut started = HashMap::new();
    let mut finished = 0;
    for (at, event) in events.iter().enumerate() {
        match &event.kind {
            EventKind::LeafStarted {
                call_id,
                path,
                label,
                ..
            } => {
                assert_eq!(path.len(), 1);
                assert_eq!(path[0].group, 1);
                assert_eq!(
                    label.as_deref(),
                    Some(format!("l{}", path[0].index).as_str())
                );
                started.insert(*call_id, at);
            }
            EventKind::LeafFinished {
                call_id,
                ok,
                replayed,
                ..
            } => {
                assert!(*ok && !*replayed);
                assert!(
                    started[call_id] < at,
                    "leaf {call_id} finished before it started"
                );
                finished += 1;
            }
            _ => {}
        }
    }
    assert_eq!((started.len(), finished), (100, 100));
    let n = events.len();
    assert_eq!(
        events[n - 2].kind,
        EventKind::Log {
            message: "done".into()
        }
    );
    match &events[n - 1].kind {
        EventKind::RunFinished { ok, summary, error } => {
            assert!(*ok && error.is_none());
            assert_eq!(summary.leaves, 100);
        }
        other => panic!("the last event is {other:?}"),
    }
}

#[tokio::test]
async fn nested_groups_give_each_leaf_its_path() {
    let rt = runtime();
    let events = events_of(
        &rt,
        "events-tree",
        r#"
async def inner(i):
    return await parallel([lambda j=j: agent(f"{i}.{j}") for j in range(2)])
top = await agent("top")
return await pipeline(["a", "b"], lambda prev, item, index: inner(index))
"#,
    )
    .await;
    let mut paths: Vec<(String, Vec<Position>)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::LeafStarted {
                prompt_preview,
                path,
                ..
            } => Some((prompt_preview.clone(), path.clone())),
            _ => None,
        })
        .collect();
    paths.sort_by(|a, b| a.0.cmp(&b.0));
    // The pipeline's items are in its one stage; the parallel branches in them have none.
    let pipe = |index| Position {
        group: 1,
        kind: Some(GroupKind::Pipeline),
        index,
        size: 2,
        stage: Some(1),
    };
    let par = |group, index| Position {
        group,
        kind: Some(GroupKind::Parallel),
        index,
        size: 2,
        stage: None,
    };
    assert_eq!(
        paths,
        vec![
            ("0.0".into(), vec![pipe(0), par(2, 0)]),
            ("0.1".into(), vec![pipe(0), par(2, 1)]),
            ("1.0".into(), vec![pipe(1), par(3, 0)]),
            ("1.1".into(), vec![pipe(1), par(3, 1)]),
            ("top".into(), vec![]),
        ]
    );
}

/// Each leaf's label and the labels of the leaves feeding it, by label.
fn feeds(events: &[Event]) -> Vec<(String, Vec<String>)> {
    let mut labels = HashMap::new();
    let mut edges = Vec::new();
    for event in events {
        if let EventKind::LeafStarted {
            call_id,
            label,
            fed_by,
            ..
        } = &event.kind
        {
            let label = label.clone().unwrap_or_default();
            labels.insert(*call_id, label.clone());
            let sources = fed_by.iter().map(|call| labels[call].clone()).collect();
            edges.push((label, sources));
        }
    }
    edges.sort();
    edges
}

#[tokio::test]
async fn a_leaf_is_fed_by_the_replies_its_prompt_quotes() {
    let rt = runtime();
    let events = events_of(
        &rt,
        "events-feeds",
        r#"
outline = await agent("outline the essay", label="outline")
parts = await parallel([lambda i=i: agent(f"write part {i} of {outline}", label=f"part {i}")
                        for i in range(2)])
tiny = await agent("yes", label="tiny")
await agent("an aside nobody quotes", instruction=f"mind the {outline}", label="aside")
return await agent("join: " + " | ".join(parts) + " / " + tiny, label="join")
"#,
    )
    .await;
    let edges = |sources: &[&str]| sources.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        feeds(&events),
        vec![
            ("aside".into(), edges(&["outline"])),
            ("join".into(), edges(&["part 0", "part 1"])),
            ("outline".into(), edges(&[])),
            ("part 0".into(), edges(&["outline"])),
            ("part 1".into(), edges(&["outline"])),
            ("tiny".into(), edges(&[])),
        ],
        "the join is fed by the parts, not by the outline they quote, nor by a reply too \
         short to tell"
    );
}

#[tokio::test]
async fn a_failed_run_ends_with_its_error() {
    let rt = runtime();
    let mut stream = rt.subscribe();
    let outcome = rt
        .run_request(RunRequest::new("x = (\n").thread_id("events-fail"))
        .await;
    assert!(outcome.result.is_err());
    let event = stream.recv().await.unwrap();
    let json = serde_json::to_value(&event).unwrap();
    assert_eq!(json["type"], "run_finished");
    assert_eq!(json["ok"], false);
    assert_eq!(json["error"]["kind"], json!("syntax"));
}

#[tokio::test]
async fn a_slow_consumer_gets_a_gap_and_never_stalls_the_run() {
    let rt = flowbox::Runtime::builder()
        .backend(FakeBackend::new())
        .event_capacity(16)
        .cache_dir(flowbox_tests::root().join("target").join("flowbox-cache"))
        .build()
        .unwrap();
    let mut slow = rt.subscribe();
    // Nobody reads while 100 leaves run: the run must finish all the same.
    let outcome = rt
        .run_request(
            RunRequest::new(
                "return len(await parallel([lambda i=i: agent(str(i)) for i in range(100)]))",
            )
            .thread_id("slow-consumer"),
        )
        .await;
    assert_eq!(outcome.result.unwrap(), json!(100));
    let first = slow.recv().await.unwrap();
    let EventKind::Gap { missed } = first.kind else {
        panic!("expected a gap first, got {first:?}");
    };
    let mut rest = vec![];
    while let Some(event) = slow.try_recv() {
        rest.push(event);
    }
    assert_eq!(rest.len(), 16);
    // 1 run_started + 100 leaf_started + 100 leaf_finished + 1 run_finished.
    assert_eq!(missed as usize + rest.len(), 202);
    assert!(matches!(
        rest.last().unwrap().kind,
        EventKind::RunFinished { .. }
    ));
    assert_eq!(rest.last().unwrap().seq, 202);
}

#[tokio::test]
async fn a_lossless_subscriber_gets_every_event_and_paces_the_script_not_its_leaves() {
    let backend = Arc::new(CountingBackend::new(Duration::from_millis(1)));
    let rt = flowbox::Runtime::builder()
        .shared_backend(backend.clone())
        .event_capacity(16)
        .cache_dir(root().join("target").join("flowbox-cache"))
        .build()
        .unwrap();
    let mut record = rt.subscribe_lossless();
    let run = tokio::spawn({
        let rt = rt.clone();
        async move {
            rt.run_request(
                RunRequest::new(
                    r#"
n = len(await parallel([lambda i=i: agent(str(i)) for i in range(100)]))
for i in range(1000):
    log(str(i))
return n
"#,
                )
                .thread_id("lossless"),
            )
            .await
        }
    });
    // Nobody reads: the record fills past its 16 events, and every leaf still runs to its end.
    tokio::time::timeout(Duration::from_secs(60), async {
        while backend.calls() < 100 || backend.in_flight() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the leaves finish while nobody reads the record");
    // The script itself waits for the reader: it cannot have finished.
    assert!(!run.is_finished(), "the script ran on past a full record");
    let mut events = Vec::new();
    while let Some(event) = record.recv().await {
        let last = matches!(event.kind, EventKind::RunFinished { .. });
        events.push(event);
        if last {
            break;
        }
    }
    assert_eq!(run.await.unwrap().result.unwrap(), json!(100));
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    // 1 run_started + 100 leaf_started + 100 leaf_finished + 1000 logs + 1 run_finished.
    assert_eq!(seqs, (1..=1202).collect::<Vec<_>>());
    assert!(events.iter().all(|e| e.thread_id == "lossless"));
    let logs: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Log { message } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(logs.len(), 1000);
    assert_eq!((logs[0], logs[999]), ("0", "999"));
}

#[tokio::test]
async fn budget_warnings_come_at_80_percent_and_when_spent() {
    let rt = flowbox_tests::scripted(
        r#"{"rules": [{"text": "ok", "tokens": {"input": 20, "output": 10}}]}"#,
        flowbox::Limits::default().with_budget_tokens(Some(100)),
    );
    let mut stream = rt.subscribe();
    let outcome = rt
        .run_request(
            RunRequest::new(
                "n = 0\nwhile True:\n    try:\n        await agent('x')\n        n += 1\n    except BudgetExceeded:\n        return n\n",
            )
            .thread_id("budget-warnings"),
        )
        .await;
    assert_eq!(outcome.result.unwrap(), json!(4));
    let mut warnings = Vec::new();
    while let Some(event) = stream.recv().await {
        match event.kind {
            EventKind::BudgetWarning { spent, total } => warnings.push((spent, total)),
            EventKind::RunFinished { .. } => break,
            _ => {}
        }
    }
    assert_eq!(warnings, vec![(90, 100), (120, 100)]);
}

/// A backend that holds every call whose prompt is `gated` until the test releases it (or
/// forever), telling the test when such a call arrives; other prompts get fake replies.
#[derive(Debug)]
struct GatedBackend {
    gated: &'static str,
    entered: Notify,
    release: Notify,
}

impl GatedBackend {
    fn new(gated: &'static str) -> Self {
        Self {
            gated,
            entered: Notify::new(),
            release: Notify::new(),
        }
    }
}

#[async_trait::async_trait]
impl LeafBackend for GatedBackend {
    async fn call(&self, request: &LeafRequest) -> Result<LeafReply, BackendError> {
        if request.prompt_text() == self.gated {
            self.entered.notify_one();
            self.release.notified().await;
        }
        FakeBackend::reply(request)
    }
}

/// The next event of `thread`, failing the test after 30 s of silence.
async fn next_of(stream: &mut EventStream, thread: &str) -> EventKind {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(30), stream.recv())
            .await
            .expect("an event within 30 s")
            .expect("the runtime is alive");
        assert!(!matches!(event.kind, EventKind::Gap { .. }), "lost events");
        if event.thread_id == thread {
            return event.kind;
        }
    }
}

#[tokio::test]
async fn leaf_events_arrive_while_the_leaf_is_still_running() {
    let backend = Arc::new(GatedBackend::new("slow"));
    let rt = flowbox_tests::runtime_with(backend.clone(), flowbox::Limits::default());
    let mut stream = rt.subscribe();
    let done = AtomicBool::new(false);
    let run = async {
        let outcome = rt
            .run_request(RunRequest::new("return await agent('slow')").thread_id("live"))
            .await;
        done.store(true, Ordering::SeqCst);
        outcome
    };
    let watch = async {
        let call = loop {
            if let EventKind::LeafStarted {
                call_id,
                prompt_preview,
                ..
            } = next_of(&mut stream, "live").await
            {
                assert_eq!(prompt_preview, "slow");
                break call_id;
            }
        };
        // The leaf has not been released, so the run cannot have finished.
        backend.entered.notified().await;
        assert!(
            !done.load(Ordering::SeqCst),
            "the run ended before its leaf"
        );
        backend.release.notify_one();
        let next = next_of(&mut stream, "live").await;
        assert!(
            matches!(next, EventKind::LeafFinished { call_id, ok: true, replayed: false, .. } if call_id == call),
            "{next:?}"
        );
        assert!(matches!(
            next_of(&mut stream, "live").await,
            EventKind::RunFinished { ok: true, .. }
        ));
    };
    let (outcome, ()) =
        tokio::time::timeout(Duration::from_secs(60), async { tokio::join!(run, watch) })
            .await
            .expect("the run finishes once its leaf is released");
    assert_eq!(outcome.result.unwrap(), json!("[fake leaf] slow"));
}

#[tokio::test]
async fn a_resumed_run_marks_journaled_leaves_as_replayed() {
    let store = Arc::new(MemoryStore::new());
    let with = |backend: Arc<dyn LeafBackend>| {
        Runtime::builder()
            .shared_backend(backend)
            .shared_store(store.clone())
            .cache_dir(root().join("target").join("flowbox-cache"))
            .build()
            .expect("the guest loads")
    };
    let script = "pair = await parallel([lambda: agent('one of a pair'), lambda: agent('two')])\n\
                  rest = [await agent('hang'), await agent('three after ' + pair[0])]\n\
                  return pair + rest";
    // The third leaf never answers: stop the run once it is in flight, as a crash would.
    let hanging = Arc::new(GatedBackend::new("hang"));
    let first = with(hanging.clone());
    tokio::select! {
        outcome = first.run_request(RunRequest::new(script).thread_id("replayed")) => {
            panic!("the run ended while a leaf hangs: {:?}", outcome.result)
        }
        () = hanging.entered.notified() => {}
    }
    let journaled = store.load("replayed").await.unwrap().unwrap().entries;
    assert_eq!(journaled.len(), 2);

    let backend = Arc::new(CountingBackend::new(Duration::ZERO));
    let rt = with(backend.clone());
    let mut stream = rt.subscribe();
    let outcome = rt.resume("replayed", None).await;
    assert_eq!(
        outcome.result.unwrap(),
        json!([
            "[fake leaf] one of a pair",
            "[fake leaf] two",
            "[fake leaf] hang",
            "[fake leaf] three after [fake leaf] one of a pair"
        ])
    );
    assert_eq!(backend.calls(), 2);
    let mut prompts: HashMap<u64, String> = HashMap::new();
    let mut replayed = Vec::new();
    let mut fed = Vec::new();
    loop {
        match next_of(&mut stream, "replayed").await {
            EventKind::LeafStarted {
                call_id,
                prompt_preview,
                fed_by,
                ..
            } => {
                let sources: Vec<String> =
                    fed_by.iter().map(|call| prompts[call].clone()).collect();
                if !sources.is_empty() {
                    fed.push((prompt_preview.clone(), sources));
                }
                prompts.insert(call_id, prompt_preview);
            }
            EventKind::LeafFinished {
                call_id,
                ok,
                replayed: from_journal,
                ..
            } => {
                assert!(ok);
                replayed.push((prompts[&call_id].clone(), from_journal));
            }
            EventKind::RunFinished { ok, .. } => {
                assert!(ok);
                break;
            }
            _ => {}
        }
    }
    replayed.sort();
    assert_eq!(
        replayed,
        vec![
            ("hang".to_owned(), false),
            ("one of a pair".to_owned(), true),
            ("three after [fake leaf] one of a pair".to_owned(), false),
            ("two".to_owned(), true),
        ]
    );
    assert_eq!(
        fed,
        vec![(
            "three after [fake leaf] one of a pair".to_owned(),
            vec!["one of a pair".to_owned()]
        )],
        "a reply from the journal feeds a live leaf as it did the first time"
    );
}

/// A leaf that consults a host tool in its own loop before answering.
#[derive(Debug)]
struct ConsultsATool;

#[async_trait::async_trait]
impl LeafBackend for ConsultsATool {
    async fn call(&self, request: &LeafRequest) -> Result<LeafReply, BackendError> {
        FakeBackend::new().call(request).await
    }

    async fn call_observed(
        &self,
        request: &LeafRequest,
        observer: &dyn LeafObserver,
    ) -> Result<LeafReply, BackendError> {
        observer.tool_called("read_file");
        observer.tool_finished("read_file", Duration::from_millis(3), None);
        observer.tool_called("list_dir");
        observer.tool_finished("list_dir", Duration::ZERO, Some("no such directory"));
        self.call(request).await
    }
}

#[tokio::test]
async fn tools_a_leaf_calls_in_its_own_loop_are_events_of_that_leaf() {
    let rt = Runtime::builder()
        .backend(ConsultsATool)
        .cache_dir(root().join("target").join("flowbox-cache"))
        .build()
        .unwrap();
    let events = events_of(&rt, "leaf-tools", "return await agent('look it up')").await;
    let kinds: Vec<&EventKind> = events.iter().map(|e| &e.kind).collect();
    let started = kinds
        .iter()
        .position(|k| matches!(k, EventKind::LeafStarted { .. }))
        .unwrap();
    let finished = kinds
        .iter()
        .position(|k| matches!(k, EventKind::LeafFinished { .. }))
        .unwrap();
    let tools: Vec<(usize, &EventKind)> = kinds
        .iter()
        .enumerate()
        .filter(|(_, k)| {
            matches!(
                k,
                EventKind::LeafToolCalled { .. } | EventKind::LeafToolFinished { .. }
            )
        })
        .map(|(i, k)| (i, *k))
        .collect();
    assert_eq!(tools.len(), 4, "{kinds:?}");
    assert!(tools.iter().all(|(i, _)| *i > started && *i < finished));
    assert_eq!(
        tools[1].1,
        &EventKind::LeafToolFinished {
            call_id: 1,
            name: "read_file".into(),
            ok: true,
            duration_ms: 3,
            error: None,
        }
    );
    assert_eq!(
        tools[3].1,
        &EventKind::LeafToolFinished {
            call_id: 1,
            name: "list_dir".into(),
            ok: false,
            duration_ms: 0,
            error: Some("no such directory".into()),
        }
    );
    let json = serde_json::to_value(&events[tools[0].0]).unwrap();
    assert_eq!(json["type"], "leaf_tool_called");
    assert_eq!(json["call_id"], 1);
}
