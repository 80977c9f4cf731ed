//! Every limit, held and breached: each ends in its own typed error, and the runtime keeps
//! working afterwards.

use std::sync::Arc;
use std::time::Duration;

use flowbox::{Limits, RunError, RunErrorClass, RunRequest, Runtime};
use flowbox_tests::{CountingBackend, result_of, runtime, runtime_with};
use serde_json::json;

async fn run_with(
    runtime: &Runtime,
    script: &str,
    limits: Limits,
) -> Result<serde_json::Value, RunError> {
    runtime
        .run_request(RunRequest::new(script).limits(limits))
        .await
        .result
}

const BUSY: &str = "n = 0\nfor i in range(args_n):\n    n += i\nreturn n\n";

fn busy(iterations: u64) -> String {
    BUSY.replace("args_n", &iterations.to_string())
}

#[tokio::test]
async fn fuel_limit_obeyed() {
    let rt = runtime();
    let result = run_with(
        &rt,
        &busy(10_000),
        Limits::default().with_fuel(2_000_000_000),
    )
    .await;
    assert_eq!(result.unwrap(), json!(49_995_000));
}

#[tokio::test]
async fn fuel_limit_violated() {
    let rt = runtime();
    let limits = Limits::default().with_fuel(200_000_000);
    let error = run_with(&rt, "while True:\n    pass\nreturn 1\n", limits)
        .await
        .unwrap_err();
    assert_eq!(error, RunError::OutOfFuel { limit: 200_000_000 });
    assert_eq!(error.class(), RunErrorClass::Limit);
}

#[tokio::test]
async fn memory_limit_obeyed() {
    let rt = runtime();
    let limits = Limits::default().with_memory_bytes(64 << 20);
    let result = run_with(&rt, "x = 'a' * (8 * 2**20)\nreturn len(x)\n", limits).await;
    assert_eq!(result.unwrap(), json!(8 << 20));
}

/// The guest's cyclic collector runs less often than CPython's default, but it runs: a loop
/// leaving 160 MB of cycles behind finishes within 64 MiB.
#[tokio::test]
async fn cyclic_garbage_is_collected_within_the_memory_limit() {
    let rt = runtime();
    let limits = Limits::default().with_memory_bytes(64 << 20);
    let script = "class Node:\n    pass\n\nfor i in range(80_000):\n    a, b = Node(), Node()\n    \
                  a.other, b.other = b, a\n    a.payload = str(i) * 500\nreturn i\n";
    let result = run_with(&rt, script, limits).await;
    assert_eq!(result.unwrap(), json!(79_999));
}

#[tokio::test]
async fn memory_limit_violated_is_a_catchable_memory_error() {
    let rt = runtime();
    let limits = Limits::default().with_memory_bytes(64 << 20);
    let caught = "try:\n    x = 'a' * 10**9\nexcept MemoryError:\n    return 'caught'\n";
    assert_eq!(
        run_with(&rt, caught, limits.clone()).await.unwrap(),
        json!("caught")
    );
    // Beyond the 32-bit guest's address space the size itself overflows; that is a
    // MemoryError to the script too, and uncaught, an out-of-memory end.
    for huge in ["'a' * 10**10", "[0] * 10**10", "'x'.ljust(10**10)"] {
        let caught = format!("try:\n    x = {huge}\nexcept MemoryError:\n    return 'caught'\n");
        assert_eq!(
            run_with(&rt, &caught, limits.clone()).await.unwrap(),
            json!("caught"),
            "{huge}"
        );
        let uncaught = format!("x = 1\ny = {huge}\nreturn 1\n");
        let error = run_with(&rt, &uncaught, limits.clone()).await.unwrap_err();
        assert!(
            matches!(error, RunError::OutOfMemory { line: Some(2), .. }),
            "{huge}: {error:?}"
        );
    }
    let growing = "x = []\nwhile True:\n    x.append('abc' * 1000)\nreturn 1\n";
    let error = run_with(&rt, growing, limits).await.unwrap_err();
    assert!(
        matches!(error, RunError::OutOfMemory { limit_bytes, line: Some(3) } if limit_bytes == 64 << 20),
        "{error:?}"
    );
    assert_eq!(error.class(), RunErrorClass::Limit);
}

/// Every way of running out of memory, each with the line where it happens: growing
/// containers, strings and bytes built up, one allocation too large, in both script forms.
/// (Today a `str` grown in place surfaced as a `TypeError` about a half-freed object.)
const EXHAUSTING: &[(&str, u32)] = &[
    (
        "x = []\nwhile True:\n    x.append([0] * 100)\nreturn 1\n",
        3,
    ),
    (
        "d = {}\ni = 0\nwhile True:\n    d[i] = str(i)\n    i += 1\nreturn 1\n",
        4,
    ),
    (
        "s = set()\ni = 0\nwhile True:\n    s.add(i)\n    i += 1\nreturn 1\n",
        4,
    ),
    (
        "b = bytearray()\nwhile True:\n    b += b'x' * 1000000\nreturn 1\n",
        3,
    ),
    ("s = ''\nwhile True:\n    s += 'x' * 1000000\nreturn 1\n", 3),
    (
        "s = ''\nchunk = 'x' * 1000000\nwhile True:\n    t = s + chunk\n    s = t\nreturn 1\n",
        4,
    ),
    (
        "parts = []\nwhile True:\n    parts.append('ab' * 500000)\nreturn ''.join(parts)\n",
        3,
    ),
    (
        "import collections\nd = collections.deque()\nwhile True:\n    d.append('x' * 1000)\nreturn 1\n",
        4,
    ),
    ("x = 1\nb = bytearray(100 * 2**20)\nreturn 1\n", 2),
    ("x = 1\nl = [None] * (30 * 2**20)\nreturn 1\n", 2),
    (
        "async def main():\n    s = ''\n    while True:\n        s += 'x' * 1000000\n    return 1\n",
        4,
    ),
    (
        "async def main():\n    x = []\n    while True:\n        x.append({'k': [1, 2, 3]})\n",
        4,
    ),
];

#[tokio::test]
async fn memory_limit_violated_in_every_way_is_out_of_memory() {
    let rt = runtime();
    let limits = Limits::default().with_memory_bytes(32 << 20);
    for &(script, line) in EXHAUSTING {
        let error = run_with(&rt, script, limits.clone()).await.unwrap_err();
        // The line is given when the interpreter could still record where it was: a
        // traceback entry needs memory too.
        assert!(
            matches!(error, RunError::OutOfMemory { limit_bytes, line: at }
                if limit_bytes == 32 << 20 && at.is_none_or(|at| at == line)),
            "{script}: {error:?}"
        );
        assert_eq!(error.kind().as_str(), "out_of_memory");
    }
    // The runtime is fine afterwards, and a script that catches running out still may.
    let caught = "x = []\ntry:\n    while True:\n        x.append([0] * 100)\nexcept MemoryError:\n    n = len(x)\n    x = None\n    return n > 0\n";
    assert_eq!(run_with(&rt, caught, limits).await.unwrap(), json!(true));
}

#[tokio::test]
async fn time_limit_obeyed() {
    let rt = runtime();
    let limits = Limits::default().with_timeout(Duration::from_secs(30));
    assert_eq!(
        run_with(&rt, &busy(1000), limits).await.unwrap(),
        json!(499_500)
    );
}

#[tokio::test]
async fn time_limit_violated_by_a_busy_script() {
    let rt = runtime();
    let limits = Limits::default()
        .with_timeout(Duration::from_millis(300))
        .with_fuel(u64::MAX / 2);
    let error = run_with(&rt, "while True:\n    pass\nreturn 1\n", limits)
        .await
        .unwrap_err();
    assert!(matches!(error, RunError::Timeout { .. }), "{error:?}");
}

/// A busy guest yields its thread every few milliseconds of work: a run started beside it on
/// the same thread (a `tokio::test` has one) finishes while the busy one still runs. Without
/// the yields the busy run would hold the thread until its fuel ran out, and end first.
#[tokio::test]
async fn a_busy_script_lets_other_runs_on_its_thread_progress() {
    let rt = runtime();
    let busy = run_with(
        &rt,
        "while True:\n    pass\nreturn 1\n",
        Limits::default().with_timeout(Duration::from_secs(600)),
    );
    let quick = result_of(&rt, "return await agent('meanwhile')");
    tokio::pin!(busy);
    tokio::select! {
        biased;
        ended = &mut busy => panic!("the busy run ended first: {ended:?}"),
        value = quick => assert_eq!(value, json!("[fake leaf] meanwhile")),
    }
}

#[tokio::test]
async fn time_limit_violated_while_waiting_cancels_the_leaf() {
    let backend = Arc::new(CountingBackend::new(Duration::from_secs(3600)));
    let rt = runtime_with(backend.clone(), Limits::default());
    let limits = Limits::default().with_timeout(Duration::from_millis(300));
    let error = run_with(&rt, "return await agent('slow')", limits)
        .await
        .unwrap_err();
    assert!(matches!(error, RunError::Timeout { .. }), "{error:?}");
    assert_eq!(backend.calls(), 1);
    // The leaf's task was aborted with the run: nothing is still in flight.
    for _ in 0..100 {
        if backend.in_flight() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(backend.in_flight(), 0);
}

#[tokio::test]
async fn recursion_limit_obeyed() {
    let rt = runtime();
    let script = "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\nreturn depth(500)\n";
    assert_eq!(result_of(&rt, script).await, json!(500));
}

#[tokio::test]
async fn recursion_limit_violated_is_a_recursion_error() {
    let rt = runtime();
    let script = "def f(n):\n    return f(n + 1)\nreturn f(0)\n";
    let error = run_with(&rt, script, Limits::default()).await.unwrap_err();
    match error {
        RunError::Script(e) => {
            assert_eq!(e.exception.as_deref(), Some("RecursionError"));
            assert_eq!(e.line, Some(2));
        }
        other => panic!("expected a RecursionError, got {other:?}"),
    }
    let caught = "def f(n):\n    return f(n + 1)\ntry:\n    f(0)\nexcept RecursionError:\n    return 'caught'\n";
    assert_eq!(result_of(&rt, caught).await, json!("caught"));
}

#[tokio::test]
async fn deep_recursion_through_c_code_never_crashes_the_host() {
    let rt = runtime();
    // Recursion through `map` uses the native wasm stack; it must end in a clean error.
    let script = "def f(n):\n    return sum(map(f, [n + 1]))\nreturn f(0)\n";
    let error = run_with(&rt, script, Limits::default().with_recursion_limit(100_000))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, RunError::StackOverflow)
            || matches!(&error, RunError::Script(e) if e.exception.as_deref() == Some("RecursionError")),
        "{error:?}"
    );
    assert_eq!(result_of(&rt, "return 1").await, json!(1));
}

#[tokio::test]
async fn script_size_limit() {
    let rt = runtime();
    let limits = Limits::default().with_max_script_bytes(100);
    let ok = format!("return {}", "1+".repeat(40) + "1");
    assert!(run_with(&rt, &ok, limits.clone()).await.is_ok());
    let big = format!("# {}\nreturn 1", "x".repeat(100));
    let error = run_with(&rt, &big, limits).await.unwrap_err();
    assert!(
        matches!(error, RunError::ScriptTooLarge { limit: 100, .. }),
        "{error:?}"
    );
    assert_eq!(error.class(), RunErrorClass::Rejected);
}

#[tokio::test]
async fn output_size_limit() {
    let rt = runtime();
    let limits = Limits::default().with_max_output_bytes(10_000);
    let ok = "for i in range(10):\n    print('x' * 100)\nreturn 1\n";
    assert!(run_with(&rt, ok, limits.clone()).await.is_ok());
    let flood = "while True:\n    print('x' * 100)\nreturn 1\n";
    let error = run_with(&rt, flood, limits).await.unwrap_err();
    assert_eq!(error, RunError::OutputTooLarge { limit: 10_000 });
}

#[tokio::test]
async fn result_size_limit() {
    let rt = runtime();
    let limits = Limits::default().with_max_result_bytes(1000);
    assert!(
        run_with(&rt, "return 'x' * 900", limits.clone())
            .await
            .is_ok()
    );
    let error = run_with(&rt, "return 'x' * 2000", limits)
        .await
        .unwrap_err();
    assert!(
        matches!(error, RunError::ResultTooLarge { limit: 1000, .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn message_and_schema_size_limits() {
    let rt = runtime();
    let limits = Limits::default()
        .with_max_message_bytes(1000)
        .with_max_schema_bytes(200);
    let script = r#"
out = []
for prompt in ["p" * 100, "p" * 5000]:
    try:
        await agent(prompt)
        out.append("ok")
    except ValueError as e:
        out.append(str(e))
for desc in ["d", "d" * 500]:
    try:
        await agent("x", schema={"type": "string", "description": desc})
        out.append("ok")
    except ValueError as e:
        out.append(str(e))
return out
"#;
    let out = run_with(&rt, script, limits).await.unwrap();
    assert_eq!(out[0], "ok");
    assert!(
        out[1]
            .as_str()
            .unwrap()
            .contains("prompt is 5002 bytes; the limit is 1000"),
        "{out}"
    );
    assert_eq!(out[2], "ok");
    assert!(out[3].as_str().unwrap().contains("schema is"), "{out}");
}

#[tokio::test]
async fn agent_cap_obeyed_and_violated() {
    let rt = runtime();
    let limits = Limits::default().with_max_agents(3);
    let script = "return await parallel([lambda i=i: agent(str(i)) for i in range(args_n)])";
    let ok = run_with(&rt, &script.replace("args_n", "3"), limits.clone())
        .await
        .unwrap();
    assert!(ok.as_array().unwrap().iter().all(|v| v.is_string()));
    let over = run_with(&rt, &script.replace("args_n", "5"), limits)
        .await
        .unwrap();
    let nulls = over
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v.is_null())
        .count();
    assert_eq!(nulls, 2, "{over}");
}

#[tokio::test]
async fn the_host_stays_healthy_after_every_kind_of_breach() {
    let rt = runtime();
    let hostile = [
        (
            "while True:\n    pass\nreturn 1\n",
            Limits::default().with_fuel(100_000_000),
        ),
        (
            "x = []\nwhile True:\n    x.append('a' * 10000)\nreturn 1\n",
            Limits::default().with_memory_bytes(48 << 20),
        ),
        (
            "while True:\n    print('flood')\nreturn 1\n",
            Limits::default().with_max_output_bytes(1000),
        ),
        (
            "while True:\n    pass\nreturn 1\n",
            Limits::default()
                .with_timeout(Duration::from_millis(100))
                .with_fuel(u64::MAX / 2),
        ),
    ];
    // Outside the limits: a native stack overflow, and a guest that traps (the interpreter's
    // own bridge to the component ABI called with a function index that does not exist).
    let stack = "def f(n):\n    return sum(map(f, [n + 1]))\nreturn f(0)\n";
    let trap =
        "import componentize_py_runtime as runtime\nruntime.call_import(2**31, [])\nreturn 1\n";
    for round in 0..3 {
        for (script, limits) in &hostile {
            assert!(run_with(&rt, script, limits.clone()).await.is_err());
            let good = result_of(&rt, &format!("return await agent('round {round}')")).await;
            assert_eq!(good, json!(format!("[fake leaf] round {round}")));
        }
        let deep = Limits::default().with_recursion_limit(100_000);
        assert!(run_with(&rt, stack, deep).await.is_err());
        assert_eq!(
            result_of(&rt, "return 'after the stack'").await,
            json!("after the stack")
        );
        let trapped = rt.run_request(RunRequest::new(trap).guard(false)).await;
        assert!(
            matches!(trapped.result, Err(RunError::Guest(_))),
            "{:?}",
            trapped.result
        );
        assert_eq!(
            result_of(&rt, "return 'after the trap'").await,
            json!("after the trap")
        );
    }
}

#[tokio::test]
async fn args_larger_than_a_message_are_refused_before_running() {
    let rt = runtime();
    let limits = Limits::default().with_max_message_bytes(1000);
    let small = rt
        .run_request(
            RunRequest::new("return len(args['s'])")
                .args(json!({"s": "a".repeat(900)}))
                .limits(limits.clone()),
        )
        .await;
    assert_eq!(small.result.unwrap(), json!(900));
    let big = rt
        .run_request(
            RunRequest::new("return len(args['s'])")
                .args(json!({"s": "a".repeat(2000)}))
                .limits(limits),
        )
        .await;
    let error = big.result.unwrap_err();
    assert!(matches!(error, RunError::InvalidArgs(_)), "{error:?}");
    assert!(
        error.to_string().contains("the limit is 1000 bytes"),
        "{error}"
    );
    assert_eq!(error.class(), RunErrorClass::Rejected);
    assert_eq!(big.summary.fuel_used, 0, "nothing ran");
}

/// A number that could not reach the script with its meaning is refused up front as
/// `invalid_args`, naming where it is: one past the largest float (it would be `inf`) and an
/// integer longer than Python converts. Numbers at the edges cross exactly.
#[tokio::test]
async fn args_numbers_no_script_could_hold_are_refused_before_running() {
    let rt = runtime();
    let args = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap();
    let long = "7".repeat(4301);
    for (text, path, says) in [
        (
            r#"{"a": {"a": 1e400}}"#,
            r#"args["a"]["a"]"#,
            "past the largest float",
        ),
        (r#"[1, -1.5E+309]"#, "args[1]", "past the largest float"),
        (
            &format!(r#"{{"n": -{long}}}"#),
            r#"args["n"]"#,
            "4301 digits",
        ),
    ] {
        let outcome = rt
            .run_request(RunRequest::new("return args").args(args(text)))
            .await;
        let error = outcome.result.unwrap_err();
        assert!(
            matches!(error, RunError::InvalidArgs(_)),
            "{text}: {error:?}"
        );
        let message = error.to_string();
        assert!(
            message.contains(path) && message.contains(says),
            "{message}"
        );
        assert_eq!(outcome.summary.fuel_used, 0, "nothing ran");
    }
    let edges = format!(
        r#"[1.7976931348623157e308, 1e-400, 5e-324, {}]"#,
        "9".repeat(4300)
    );
    let crossed = rt
        .run_request(RunRequest::new("return [repr(v)[:12] for v in args]").args(args(&edges)))
        .await;
    assert_eq!(
        crossed.result.unwrap(),
        json!(["1.7976931348", "0.0", "5e-324", "999999999999"])
    );
}

#[tokio::test]
async fn a_reply_larger_than_a_message_is_an_agent_error_the_script_catches() {
    let rt = flowbox_tests::scripted(
        r#"{"rules": [{"prompt": "small", "text": "ok"}], "fallback": "fake"}"#,
        Limits::default().with_max_message_bytes(1000),
    );
    let script = r#"
out = [await agent("small")]
try:
    await agent("big " + "x" * 990)
    out.append("no error")
except AgentError as e:
    out.append(str(e))
return out
"#;
    let out = result_of(&rt, script).await;
    assert_eq!(out[0], "ok");
    // The fake fallback quotes the prompt, so the reply is a few bytes over the limit.
    assert!(out[1].as_str().unwrap().contains("1000"), "{out}");
}

/// Resident memory of this process in bytes (Linux), to see that runs give memory back.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_hostile_runs_at_once_leave_good_runs_correct() {
    let rt = runtime();
    // Warm up so the baseline includes the compiled guest and the first instantiation.
    assert_eq!(result_of(&rt, "return 1").await, json!(1));
    let baseline = resident_bytes();
    let hostile = [
        (
            "while True:\n    pass\nreturn 1\n",
            Limits::default().with_fuel(300_000_000),
        ),
        (
            "x = []\nwhile True:\n    x.append('x' * 1000000)\nreturn 1\n",
            Limits::default().with_memory_bytes(64 << 20),
        ),
        (
            "while True:\n    print('x' * 1000)\nreturn 1\n",
            Limits::default().with_max_output_bytes(100_000),
        ),
    ];
    let mut tasks = Vec::new();
    for i in 0..120usize {
        let rt = rt.clone();
        let (script, limits, good) = if i % 6 == 0 {
            (
                format!("return await agent('good {i}')"),
                Limits::default(),
                true,
            )
        } else {
            let (script, limits) = &hostile[i % 3];
            ((*script).to_owned(), limits.clone(), false)
        };
        tasks.push(tokio::spawn(async move {
            let outcome = rt.run_request(RunRequest::new(script).limits(limits)).await;
            (i, good, outcome.result)
        }));
    }
    let mut good_runs = 0;
    for task in tasks {
        let (i, good, result) = task.await.expect("the run task completes");
        if good {
            assert_eq!(result.unwrap(), json!(format!("[fake leaf] good {i}")));
            good_runs += 1;
        } else {
            let error = result.unwrap_err();
            assert!(error.is_limit(), "hostile run {i} ended with {error:?}");
        }
    }
    assert_eq!(good_runs, 20);
    if let Some(before) = baseline {
        // Finished runs' stores are dropped on a background thread, and other tests of this
        // process run meanwhile: memory given back within a few seconds counts (a liveness
        // bound, not a timing).
        let mut grown = 0;
        for _ in 0..100 {
            let Some(after) = resident_bytes() else {
                return;
            };
            grown = after.saturating_sub(before) >> 20;
            if grown < 256 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        println!(
            "resident memory: {} MiB before, grew by {grown} MiB",
            before >> 20
        );
        assert!(
            grown < 256,
            "resident memory grew by {grown} MiB and stayed"
        );
    }
}

#[tokio::test]
async fn long_log_lines_are_cut_and_empty_ones_still_count() {
    let rt = runtime();
    let limits = Limits::default()
        .with_max_message_bytes(100)
        .with_max_output_bytes(1000);
    let outcome = rt
        .run_request(
            RunRequest::new("log('x' * 500)\nphase('p' * 300)\nreturn 1").limits(limits.clone()),
        )
        .await;
    assert_eq!(outcome.result.unwrap(), json!(1));
    assert_eq!(
        outcome.summary.logs[0],
        format!("{}… [400 more bytes cut]", "x".repeat(100))
    );
    assert!(outcome.summary.phases[0].ends_with("[200 more bytes cut]"));
    let flood = run_with(&rt, "while True:\n    log('')\nreturn 1\n", limits)
        .await
        .unwrap_err();
    assert_eq!(flood, RunError::OutputTooLarge { limit: 1000 });
}

#[tokio::test]
async fn a_huge_exception_message_is_cut_to_a_readable_size() {
    let rt = runtime();
    let script = "class Odd(Exception):\n    pass\nraise Odd('é' * 10**6)\nreturn 1\n";
    let error = run_with(&rt, script, Limits::default()).await.unwrap_err();
    let RunError::Script(info) = &error else {
        panic!("{error:?}");
    };
    assert_eq!(info.exception.as_deref(), Some("Odd"));
    assert_eq!(info.line, Some(3));
    assert!(
        info.message.len() < 17 << 10,
        "{} bytes",
        info.message.len()
    );
    assert!(info.message.starts_with("éé"));
    assert!(
        info.message.ends_with("more bytes cut]"),
        "{}",
        &info.message[16_000..]
    );
}
