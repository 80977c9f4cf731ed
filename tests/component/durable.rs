//! Durable runs through the real guest: the journal, exact replay, divergence, interrupted
//! runs, and the leaf cache.

use std::sync::Arc;
use std::time::Duration;

use flowbox::backends::{FakeBackend, ScriptedBackend};
use flowbox::store::{CheckpointStore, MemoryStore, SqliteStore, StoreError, ThreadStatus};
use flowbox::{
    JournalError, LeafBackend, RunError, RunErrorClass, RunErrorKind, RunRequest, Runtime,
};
use flowbox_tests::{CountingBackend, PanickingBackend, root};
use serde_json::json;

fn runtime(backend: Arc<dyn LeafBackend>, store: Arc<dyn CheckpointStore>) -> Runtime {
    Runtime::builder()
        .shared_backend(backend)
        .shared_store(store)
        .cache_dir(root().join("target").join("flowbox-cache"))
        .build()
        .expect("the guest loads")
}

/// A script whose control flow depends on completion order, time and randomness.
const BUSY_SCRIPT: &str = r#"
import random, time
t0 = time.time()
picks = [random.randint(0, 100) for _ in range(3)]
reviews = await parallel([lambda i=i: agent(f"review {i}") for i in range(12)])
order = []
async def step(prev, item):
    order.append(item)
    return await agent(f"step {item}: {prev[:20]}")
steps = await pipeline(["a", "b", "c", "d"], lambda item: agent(f"draft {item}"), step)
time.sleep(3)
return {"picks": picks, "reviews": reviews, "steps": steps, "t0": t0,
        "elapsed": round(time.time() - t0, 3)}
"#;

/// Copies a thread's header and journal, without its end, into a fresh store: the state a
/// crash just before the script returned would have left.
async fn interrupted_copy(from: &MemoryStore, thread_id: &str) -> Arc<MemoryStore> {
    let run = from.load(thread_id).await.unwrap().unwrap();
    let copy = Arc::new(MemoryStore::new());
    copy.begin(&run.header).await.unwrap();
    copy.append(thread_id, &run.entries).await.unwrap();
    copy
}

#[tokio::test]
async fn every_completion_is_journaled_and_the_end_recorded() {
    let store = Arc::new(MemoryStore::new());
    let rt = runtime(Arc::new(FakeBackend::new()), store.clone());
    let outcome = rt
        .run_request(RunRequest::new(BUSY_SCRIPT).thread_id("journal"))
        .await;
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    let run = store.load("journal").await.unwrap().unwrap();
    assert_eq!(run.entries.len() as u32, outcome.summary.leaves);
    assert_eq!(run.entries.len(), 12 + 8);
    let seqs: Vec<u64> = run.entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..20).collect::<Vec<_>>());
    assert!(run.entries.windows(2).all(|w| w[0].batch <= w[1].batch));
    assert_eq!(run.status, ThreadStatus::Succeeded);
    let end = run.end.unwrap();
    assert_eq!(end.outcome.result.unwrap(), outcome.result.unwrap());
}

#[tokio::test]
async fn replay_gives_the_same_result_and_fuel_without_calling_the_backend() {
    let store = Arc::new(MemoryStore::new());
    let live = runtime(Arc::new(FakeBackend::new()), store.clone());
    let first = live
        .run_request(RunRequest::new(BUSY_SCRIPT).thread_id("exact"))
        .await;
    let first_result = first.result.clone().unwrap();

    let replay = runtime(
        Arc::new(PanickingBackend::always()),
        interrupted_copy(&store, "exact").await,
    );
    let again = replay.resume("exact", None).await;
    assert_eq!(again.result.unwrap(), first_result);
    assert_eq!(again.summary.fuel_used, first.summary.fuel_used);
    assert_eq!(again.summary.tokens_spent, first.summary.tokens_spent);
    assert_eq!(first_result["elapsed"], json!(3.0));
}

#[tokio::test]
async fn a_finished_thread_returns_its_recorded_outcome() {
    let store = Arc::new(MemoryStore::new());
    let live = runtime(Arc::new(FakeBackend::new()), store.clone());
    let first = live
        .run_request(RunRequest::new("return await agent('once')").thread_id("done"))
        .await;
    let again = runtime(Arc::new(PanickingBackend::always()), store.clone())
        .resume("done", None)
        .await;
    assert_eq!(again.result.unwrap(), first.result.unwrap());
    assert_eq!(again.summary.leaves, 1);
    // A failed thread replays its failure the same way.
    live.run_request(RunRequest::new("raise ValueError('no')\nreturn 1").thread_id("failed"))
        .await;
    let again = live.resume("failed", None).await;
    let error = again.result.unwrap_err();
    assert_eq!(error.kind(), RunErrorKind::Uncaught);
    assert_eq!(error.class(), RunErrorClass::Script);
    assert_eq!(error.line(), Some(1));
}

/// A run that starts its thread, under an id drawn for it, journals it as any new thread; one
/// that finds its thread in the journal already is refused and leaves the thread as it was.
#[tokio::test]
async fn a_run_that_starts_its_thread_is_refused_if_the_thread_exists() {
    let dir = tempfile::tempdir().unwrap();
    let stores: [Arc<dyn CheckpointStore>; 2] = [
        Arc::new(MemoryStore::new()),
        Arc::new(SqliteStore::open(dir.path().join("journal.db")).unwrap()),
    ];
    for store in stores {
        let rt = runtime(Arc::new(FakeBackend::new()), Arc::clone(&store));
        let thread_id = RunRequest::new_thread_id();
        let script = "return await agent('once')";
        let first = rt
            .run_request(RunRequest::new(script).start_thread(&thread_id))
            .await;
        assert_eq!(first.summary.thread_id, thread_id);
        let result = first.result.unwrap();
        let again = rt
            .run_request(RunRequest::new("return 2").start_thread(&thread_id))
            .await;
        match again.result {
            Err(RunError::Journal(JournalError::Store(StoreError::ThreadExists(id)))) => {
                assert_eq!(id, thread_id);
            }
            other => panic!("a second start of {thread_id} was not refused: {other:?}"),
        }
        // Asked for by id, the thread answers with what its one run recorded.
        let recorded = runtime(Arc::new(PanickingBackend::always()), Arc::clone(&store))
            .run_request(RunRequest::new(script).thread_id(&thread_id))
            .await;
        assert!(recorded.recorded);
        assert_eq!(recorded.result.unwrap(), result);
        let thread = store.load(&thread_id).await.unwrap().unwrap();
        assert_eq!(
            (thread.entries.len(), thread.status),
            (1, ThreadStatus::Succeeded)
        );
    }
}

#[tokio::test]
async fn an_edited_script_or_args_on_an_existing_thread_is_a_divergence() {
    let store = Arc::new(MemoryStore::new());
    let rt = runtime(Arc::new(FakeBackend::new()), store);
    rt.run_request(RunRequest::new("return await agent('v1')").thread_id("edit"))
        .await;
    let edited = rt
        .run_request(RunRequest::new("return await agent('v2')").thread_id("edit"))
        .await;
    let error = edited.result.unwrap_err();
    assert!(
        matches!(&error, RunError::Divergence(m) if m.contains("script")),
        "{error}"
    );
    let other_args = rt
        .run_request(
            RunRequest::new("return await agent('v1')")
                .thread_id("edit")
                .args(json!({"x": 1})),
        )
        .await;
    assert!(matches!(&other_args.result, Err(RunError::Divergence(m)) if m.contains("args")));
}

#[tokio::test]
async fn a_journal_that_disagrees_with_the_script_stops_with_the_call_named() {
    let store = Arc::new(MemoryStore::new());
    let rt = runtime(Arc::new(FakeBackend::new()), store.clone());
    let script = "a = await agent('first')\nb = await agent('second')\nreturn [a, b]";
    rt.run_request(RunRequest::new(script).thread_id("tampered"))
        .await;
    // Rewrite the journal as if call 2 had been a different request.
    let run = store.load("tampered").await.unwrap().unwrap();
    let mut entries = run.entries.clone();
    entries[1].fingerprint = "0".repeat(64);
    let copy = Arc::new(MemoryStore::new());
    copy.begin(&run.header).await.unwrap();
    copy.append("tampered", &entries).await.unwrap();
    let outcome = runtime(Arc::new(PanickingBackend::always()), copy)
        .resume("tampered", None)
        .await;
    let error = outcome.result.unwrap_err();
    assert!(
        matches!(&error, RunError::Divergence(m) if m.contains("call 2")),
        "{error}"
    );
    assert_eq!(error.kind(), RunErrorKind::Divergence);
}

#[tokio::test]
async fn an_interrupted_run_calls_only_the_leaves_it_had_not_finished() {
    let store = Arc::new(MemoryStore::new());
    let backend = Arc::new(CountingBackend::new(Duration::from_millis(150)));
    let rt = runtime(backend.clone(), store.clone());
    let script =
        "out = []\nfor i in range(8):\n    out.append(await agent(f'step {i}'))\nreturn out";
    // Drop the run midway, as a crash would.
    let interrupted = tokio::time::timeout(
        Duration::from_millis(700),
        rt.run_request(RunRequest::new(script).thread_id("crash")),
    )
    .await;
    assert!(interrupted.is_err(), "the run should still have been going");
    let journaled = store.load("crash").await.unwrap().unwrap().entries.len();
    assert!(
        (2..8).contains(&journaled),
        "{journaled} completions journaled"
    );
    let calls_before = backend.calls();

    let outcome = rt.resume("crash", None).await;
    let result = outcome.result.unwrap();
    assert_eq!(result.as_array().unwrap().len(), 8);
    assert_eq!(result[7], json!("[fake leaf] step 7"));
    // Finished leaves are not paid for twice; the one in flight at the crash is called again.
    assert_eq!(backend.calls() - calls_before, 8 - journaled);
    assert_eq!(outcome.summary.leaves, 8);
}

#[tokio::test]
async fn a_thread_runs_in_one_place_at_a_time() {
    let store = Arc::new(MemoryStore::new());
    let backend = Arc::new(CountingBackend::new(Duration::from_millis(200)));
    let rt = runtime(backend.clone(), store.clone());
    let script = "return [await agent('one'), await agent('two')]";
    let first = rt.run_request(RunRequest::new(script).thread_id("shared"));
    let second = async {
        // Once the first run has journaled a leaf, a second run of the thread is refused.
        while store
            .load("shared")
            .await
            .unwrap()
            .is_none_or(|r| r.entries.is_empty())
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let calls = backend.calls();
        let refused = rt.resume("shared", None).await;
        assert_eq!(backend.calls(), calls, "the refused run called the backend");
        refused
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!(
        first.result.unwrap(),
        json!(["[fake leaf] one", "[fake leaf] two"])
    );
    let error = second.result.unwrap_err();
    assert!(matches!(error, RunError::ThreadInUse(_)), "{error}");
    assert_eq!(
        (error.kind(), error.class()),
        (RunErrorKind::ThreadInUse, RunErrorClass::Rejected)
    );
    assert!(
        error.to_string().contains("thread shared is being run"),
        "{error}"
    );
    assert_eq!(backend.calls(), 2);
    // The claim ended with the run.
    let again = rt.resume("shared", None).await;
    assert_eq!(
        again.result.unwrap(),
        json!(["[fake leaf] one", "[fake leaf] two"])
    );
}

#[tokio::test]
async fn reused_leaves_answer_identical_requests_of_an_edited_script() {
    let store = Arc::new(MemoryStore::new());
    let backend = Arc::new(CountingBackend::new(Duration::ZERO));
    let rt = runtime(backend.clone(), store.clone());
    let v1 = "return await parallel([lambda i=i: agent(f'item {i}') for i in range(5)])";
    let first = rt.run_request(RunRequest::new(v1).thread_id("v1")).await;
    assert_eq!(backend.calls(), 5);
    let v2 = "r = await parallel([lambda i=i: agent(f'item {i}') for i in range(6)])\nreturn r + [await agent('new')]";
    let second = rt
        .run_request(RunRequest::new(v2).thread_id("v2").reuse_leaves_from("v1"))
        .await;
    let result = second.result.unwrap();
    assert_eq!(
        &result.as_array().unwrap()[..5],
        first.result.unwrap().as_array().unwrap()
    );
    // Only `item 5` and `new` were new requests.
    assert_eq!(backend.calls(), 7);
    let missing = rt
        .run_request(
            RunRequest::new(v2)
                .thread_id("v3")
                .reuse_leaves_from("nope"),
        )
        .await;
    assert!(matches!(missing.result, Err(RunError::UnknownThread(_))));
}

#[tokio::test]
async fn resuming_needs_a_known_thread_and_a_journal() {
    let rt = runtime(Arc::new(FakeBackend::new()), Arc::new(MemoryStore::new()));
    let error = rt.resume("ghost", None).await.result.unwrap_err();
    assert_eq!(error, RunError::UnknownThread("ghost".into()));
    assert_eq!(error.class(), RunErrorClass::Rejected);
    let plain = flowbox_tests::runtime();
    let error = plain.resume("ghost", None).await.result.unwrap_err();
    assert!(matches!(error, RunError::Journal(_)), "{error}");
}

#[tokio::test]
async fn failures_of_the_machinery_leave_the_thread_open() {
    let store = Arc::new(MemoryStore::new());
    let rt = runtime(Arc::new(FakeBackend::new()), store.clone());
    let script = "a = await agent('first')\nb = await agent('second')\nreturn [a, b]";
    rt.run_request(RunRequest::new(script).thread_id("open"))
        .await;
    let run = store.load("open").await.unwrap().unwrap();
    let mut entries = run.entries.clone();
    entries[1].fingerprint = "0".repeat(64);
    let copy = Arc::new(MemoryStore::new());
    copy.begin(&run.header).await.unwrap();
    copy.append("open", &entries).await.unwrap();
    let outcome = runtime(Arc::new(PanickingBackend::always()), copy.clone())
        .resume("open", None)
        .await;
    assert!(matches!(outcome.result, Err(RunError::Divergence(_))));
    // The divergence did not close the thread: it can still be resumed once fixed.
    assert_eq!(
        copy.load("open").await.unwrap().unwrap().status,
        ThreadStatus::Resumable
    );
}

#[tokio::test]
async fn a_resumed_thread_keeps_its_guard_and_limits() {
    let store = Arc::new(MemoryStore::new());
    let backend = Arc::new(CountingBackend::new(Duration::from_millis(150)));
    let rt = runtime(backend.clone(), store.clone());
    // Unguarded (it imports os) and with a budget that stops it after a few leaves.
    let script = "import os\nout = []\nfor i in range(6):\n    try:\n        out.append(await agent(f'step {i}'))\n    except BudgetExceeded:\n        break\nreturn [os.sep, len(out)]";
    let limits = flowbox::Limits::default().with_budget_tokens(Some(20));
    let expected = rt
        .run_request(
            RunRequest::new(script)
                .thread_id("kept-reference")
                .guard(false)
                .limits(limits.clone()),
        )
        .await
        .result
        .unwrap();
    assert!(expected[1].as_u64().unwrap() < 6, "{expected}");
    let interrupted = tokio::time::timeout(
        Duration::from_millis(200),
        rt.run_request(
            RunRequest::new(script)
                .thread_id("kept")
                .guard(false)
                .limits(limits),
        ),
    )
    .await;
    assert!(interrupted.is_err());
    let header = store.load("kept").await.unwrap().unwrap().header;
    assert!(!header.guard);
    let outcome = rt.resume("kept", None).await;
    assert_eq!(outcome.result.unwrap(), expected);
}

#[tokio::test]
async fn thread_ids_are_checked_before_anything_runs() {
    let rt = runtime(
        Arc::new(PanickingBackend::always()),
        Arc::new(MemoryStore::new()),
    );
    for bad in ["a b", "../x", ""] {
        let outcome = rt
            .run_request(RunRequest::new("return 1").thread_id(bad))
            .await;
        let error = outcome.result.unwrap_err();
        assert_eq!(error.kind(), RunErrorKind::InvalidThreadId, "{bad:?}");
        assert_eq!(error.class(), RunErrorClass::Rejected);
    }
}

#[tokio::test]
async fn a_script_sees_whether_a_failed_leaf_may_be_retried_and_replays_it_the_same() {
    let backend = ScriptedBackend::from_json(
        r#"{"rules": [
            {"prompt": "^flaky$", "error": "provider overloaded", "retryable": true},
            {"prompt": "^refused$", "error": "content refused"}
        ]}"#,
    )
    .unwrap();
    let script = "out = []\nfor p in ['flaky', 'refused']:\n    try:\n        await agent(p)\n    except AgentError as e:\n        out.append([p, str(e), e.retryable, e.kind])\nreturn out\n";
    let store = Arc::new(MemoryStore::new());
    let live = runtime(Arc::new(backend), store.clone());
    let first = live
        .run_request(RunRequest::new(script).thread_id("retry"))
        .await;
    let expected = json!([
        ["flaky", "provider overloaded", true, "agent_failed"],
        ["refused", "content refused", false, "agent_failed"]
    ]);
    assert_eq!(first.result.unwrap(), expected);

    // The journal keeps what the script was told, so a replay decides the same way.
    let replay = runtime(
        Arc::new(PanickingBackend::always()),
        interrupted_copy(&store, "retry").await,
    );
    let again = replay.resume("retry", None).await;
    assert_eq!(again.result.unwrap(), expected);
    assert_eq!(again.summary.fuel_used, first.summary.fuel_used);
}

/// Runs SQL on a journal file, as damage from outside flowbox would.
fn damage(path: &std::path::Path, sql: &str) {
    rusqlite::Connection::open(path)
        .unwrap()
        .execute_batch(sql)
        .unwrap();
}

fn column(path: &std::path::Path, sql: &str) -> Option<String> {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row(sql, [], |row| row.get(0))
        .unwrap()
}

fn corrupt_thread(error: &RunError) -> (&str, &str) {
    match error {
        RunError::Journal(JournalError::Corrupt { thread_id, detail }) => (thread_id, detail),
        other => panic!("expected a corrupt journal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_damaged_entry_is_a_corrupt_journal_and_the_thread_stays_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let script = "a = await agent('one')\nb = await agent('two')\nreturn [a, b]";
    let first = runtime(Arc::new(FakeBackend::new()), store.clone())
        .run_request(RunRequest::new(script).thread_id("damaged"))
        .await;
    let expected = first.result.unwrap();
    // Interrupted before its end, then its second completion damaged.
    damage(
        &path,
        "UPDATE runs SET status = 'running', outcome = NULL, finished_unix_ms = NULL;",
    );
    let intact = column(&path, "SELECT outcome FROM entries WHERE seq = 1").unwrap();
    // An outcome that is not one, and replies the script must never be handed: text that is
    // not JSON (the script would see a JSONDecodeError), and a number it would read as
    // infinity.
    for (outcome, says) in [
        (r#"{"status":"ok"}"#, "missing field `value`"),
        (r#"{"status":"ok","value":"[1"}"#, "its reply is not JSON"),
        (
            r#"{"status":"ok","value":"1e999"}"#,
            "its reply holds the number 1e+999, beyond any float",
        ),
    ] {
        damage(
            &path,
            &format!("UPDATE entries SET outcome = '{outcome}' WHERE seq = 1;"),
        );
        let resumed = runtime(Arc::new(PanickingBackend::always()), store.clone())
            .resume("damaged", None)
            .await;
        let error = resumed.result.unwrap_err();
        let (thread_id, detail) = corrupt_thread(&error);
        assert_eq!(thread_id, "damaged");
        assert!(detail.contains("entry 1 (call 2)"), "{detail}");
        assert!(detail.contains(says), "{outcome}: {detail}");
        assert_eq!(error.kind(), RunErrorKind::JournalFailure);
        assert_eq!(error.class(), RunErrorClass::Machinery);
        // Nothing was recorded over it: the thread is open, and resumes once repaired.
        let status = column(&path, "SELECT status FROM runs WHERE thread_id = 'damaged'");
        assert_eq!(status.as_deref(), Some("running"));
    }
    damage(
        &path,
        &format!("UPDATE entries SET outcome = '{intact}' WHERE seq = 1;"),
    );
    let repaired = runtime(Arc::new(PanickingBackend::always()), store)
        .resume("damaged", None)
        .await;
    assert_eq!(repaired.result.unwrap(), expected);
}

#[tokio::test]
async fn a_damaged_recorded_outcome_is_a_corrupt_journal_not_a_default() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let rt = runtime(Arc::new(FakeBackend::new()), store.clone());
    rt.run_request(RunRequest::new("return await agent('once')").thread_id("ended"))
        .await
        .result
        .unwrap();
    let summary = r#"{"thread_id":"ended","name":null,"agents_spawned":1,"tokens_spent":0,"input_tokens":0,"output_tokens":0,"phases":[],"logs":[],"fuel_used":1,"duration_ms":1,"ok":false}"#;
    for damaged in [
        // No summary: it used to read as an empty one.
        r#"{"ok":true,"result":1,"error":null}"#.to_owned(),
        // A kind of error no build wrote.
        format!(
            r#"{{"ok":false,"result":null,"error":{{"kind":"made_up","message":"x"}},"summary":{summary}}}"#
        ),
        // A failure without its error.
        format!(r#"{{"ok":false,"result":null,"error":null,"summary":{summary}}}"#),
    ] {
        damage(
            &path,
            &format!("UPDATE runs SET outcome = '{damaged}' WHERE thread_id = 'ended';"),
        );
        let again = rt.resume("ended", None).await;
        let error = again.result.unwrap_err();
        let (thread_id, detail) = corrupt_thread(&error);
        assert_eq!(thread_id, "ended");
        assert!(detail.contains("recorded outcome"), "{damaged}: {detail}");
        assert!(!again.recorded, "{damaged}");
        // Left as it was: still finished, with the same (damaged) record.
        let row = column(
            &path,
            "SELECT status || outcome FROM runs WHERE thread_id = 'ended'",
        );
        assert_eq!(row, Some(format!("succeeded{damaged}")));
    }
}

/// A leaf backend that fails each prompt with the typed error it names.
#[derive(Debug)]
struct TypedFailures;

#[flowbox::async_trait]
impl LeafBackend for TypedFailures {
    async fn call(
        &self,
        request: &flowbox::LeafRequest,
    ) -> Result<flowbox::LeafReply, flowbox::BackendError> {
        let kind = match request.prompt_text().as_str() {
            "rate limited" => flowbox::BackendErrorKind::Http {
                provider: "loopback".into(),
                status: 429,
                provider_code: Some("rate_limit_exceeded".into()),
                param: None,
                retry_after: Some(Duration::from_secs(1)),
                attempts: 3,
                message: "429 Too Many Requests".into(),
            },
            _ => flowbox::BackendErrorKind::Truncated { max_tokens: 16 },
        };
        Err(kind.into())
    }
}

#[tokio::test]
async fn a_script_sees_the_backends_word_for_a_failure() {
    let rt = runtime(Arc::new(TypedFailures), Arc::new(MemoryStore::new()));
    let script = "out = []\nfor p in ['rate limited', 'long']:\n    try:\n        await agent(p)\n    except AgentError as e:\n        out.append([e.kind, e.retryable])\nreturn out\n";
    let outcome = rt.run(script, json!({})).await;
    assert_eq!(
        outcome.result.unwrap(),
        json!([["http", true], ["truncated", false]])
    );
}

#[tokio::test]
async fn a_result_the_host_cannot_parse_is_an_invalid_result_that_ends_the_thread() {
    let store = Arc::new(MemoryStore::new());
    let rt = runtime(Arc::new(PanickingBackend::always()), store.clone());
    // Only an unguarded script can reach the SDK's own result writer to break it.
    let script = "import sys\nsys.modules['flowbox_sdk.runner']._result_json = lambda *_: '[1 2]'\nreturn [1, 2]\n";
    let outcome = rt
        .run_request(RunRequest::new(script).thread_id("unparsable").guard(false))
        .await;
    let error = outcome.result.unwrap_err();
    assert_eq!(error.kind(), RunErrorKind::InvalidResult, "{error}");
    assert_eq!(error.class(), RunErrorClass::Script);
    let run = store.load("unparsable").await.unwrap().unwrap();
    assert_eq!(run.status, ThreadStatus::Failed);
    assert_eq!(
        run.end.unwrap().outcome.result.unwrap_err().kind,
        RunErrorKind::InvalidResult
    );
}
