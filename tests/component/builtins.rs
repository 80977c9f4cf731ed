//! The script contract's builtins through the real guest: harmless Python a model writes
//! without thinking runs, and every builtin of the guest's own interpreter is either there or
//! refused by the guard on its line with the contract's reason — never a `NameError` later.

use flowbox::RunRequest;
use flowbox_tests::{error_of, result_of, root, runtime};
use serde_json::{Value, json};

/// The script contract, as the guest and the guidance read it.
fn contract() -> Value {
    let path = root().join("host/flowbox/contract/script.json");
    let text = std::fs::read_to_string(&path).expect("the script contract is readable");
    serde_json::from_str(&text).expect("the script contract is JSON")
}

#[tokio::test]
async fn harmless_python_runs() {
    let rt = runtime();
    let cases = [
        (
            r#"
try:
    b"\xff".decode("utf-8")
except UnicodeDecodeError as error:
    return error.reason
"#,
            json!("invalid start byte"),
        ),
        (
            r#"
try:
    raise KeyboardInterrupt()
except BaseException as error:
    return type(error).__name__
"#,
            json!("KeyboardInterrupt"),
        ),
        (
            r#"
try:
    raise ConnectionResetError("reset")
except (ConnectionError, OSError) as error:
    return [str(error), isinstance(error, OSError)]
"#,
            json!(["reset", true]),
        ),
        (
            "z = complex(1, 2)\nreturn [z.real, z.imag]",
            json!([1.0, 2.0]),
        ),
        (
            "data = bytearray(b'x')\ndata += b'y'\nreturn data.decode()",
            json!("xy"),
        ),
        (
            r#"
async def replies():
    for prompt in ["a", "b"]:
        yield await agent(prompt)

it = aiter(replies())
return [await anext(it), await anext(it), await anext(it, None)]
"#,
            json!(["[fake leaf] a", "[fake leaf] b", null]),
        ),
        (
            r#"
reply = await agent("x", schema={"type": "object"})
return [hasattr(reply, "get"), getattr(reply, "missing", 0)]
"#,
            json!([true, 0]),
        ),
    ];
    for (script, expected) in cases {
        assert_eq!(result_of(&rt, script).await, expected, "{script}");
    }
}

#[tokio::test]
async fn a_computed_getattr_or_hasattr_name_is_refused_on_its_line() {
    let rt = runtime();
    for script in [
        "x = 1\nreturn getattr(agent, '__glo' + 'bals__')",
        "x = 1\nreturn hasattr(args, args['name'])",
        "x = 1\nreturn hasattr(budget, '_host')",
    ] {
        let error = error_of(&rt, script).await;
        assert_eq!(error["kind"], "forbidden", "{script}: {error}");
        assert_eq!(error["line"], 2, "{script}: {error}");
    }
}

#[tokio::test]
async fn every_builtin_of_the_guest_is_available_or_refused_with_a_reason() {
    let rt = runtime();
    // The guest interpreter's own builtins, read with the guard off.
    let list =
        "import builtins, keyword\nreturn [n for n in dir(builtins) if not keyword.iskeyword(n)]";
    let listed = rt
        .run_request(RunRequest::new(list).guard(false))
        .await
        .result
        .expect("an unguarded run lists the builtins");
    let names: Vec<&str> = listed
        .as_array()
        .expect("a list")
        .iter()
        .map(|name| name.as_str().expect("a name"))
        .collect();
    assert!(
        names.contains(&"BaseException") && names.contains(&"open"),
        "{names:?}"
    );
    let contract = contract();
    let refused = contract["builtins"]["refused"]
        .as_object()
        .expect("refused builtins with reasons");
    let literal_name = contract["builtins"]["literal_attribute_name"]
        .as_object()
        .expect("builtins that take a literal name");
    let mut available = 0;
    for name in names {
        let outcome = rt
            .run(&format!("value = {name}\nreturn 1\n"), json!({}))
            .await;
        if outcome.result.is_ok() {
            available += 1;
            continue;
        }
        let error = outcome.to_json()["error"].clone();
        assert_eq!(error["kind"], "forbidden", "{name}: {error}");
        assert_eq!(error["line"], 1, "{name}: {error}");
        let message = error["message"].as_str().expect("a message");
        let reason = refused.get(name).or_else(|| literal_name.get(name));
        match reason {
            Some(reason) => {
                let reason = reason.as_str().expect("a reason");
                assert!(message.ends_with(reason), "{name}: {message}");
            }
            None => assert!(
                name.starts_with("__") && name.ends_with("__"),
                "{name} is neither available nor refused by the contract: {message}"
            ),
        }
    }
    // The contract's available names and every exception class.
    assert!(available > 100, "only {available} builtins are available");
}
