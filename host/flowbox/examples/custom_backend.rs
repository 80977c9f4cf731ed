//! A leaf backend of your own: anything implementing `LeafBackend` answers a script's
//! `agent(...)` calls. This one looks terms up in a glossary and fails, for good, on terms
//! it does not know; the script turns each failure into a `None` with `parallel`.
//!
//! `cargo run --release -p flowbox --example custom_backend`

use flowbox::backends::FakeBackend;
use flowbox::{BackendError, LeafBackend, LeafReply, LeafRequest, Runtime, Usage};
use serde_json::{Value, json};

#[derive(Debug)]
struct Glossary;

#[flowbox::async_trait]
impl LeafBackend for Glossary {
    async fn call(&self, request: &LeafRequest) -> Result<LeafReply, BackendError> {
        let term = request.prompt_text();
        let meaning = match term.as_str() {
            "fuel" => "the CPU budget of a run",
            "leaf" => "one agent call the host makes for the script",
            // Asking again cannot help, so the failure is terminal, not retryable.
            _ => return Err(BackendError::terminal(format!("no entry for {term:?}"))),
        };
        Ok(LeafReply {
            value: Value::String(meaning.into()),
            // A dictionary reads no tokens: these are counts, not estimates.
            usage: Usage::reported(1, 1),
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = Runtime::builder().backend(Glossary).build()?;
    let script = r#"
terms = args["terms"]
meanings = await parallel([lambda t=t: agent(t) for t in terms])
try:
    await agent("epoch")
    strict = "found"
except AgentError as e:
    strict = f"AgentError: {e}"
return {"meanings": dict(zip(terms, meanings)), "strict": strict}
"#;
    let outcome = runtime
        .run(script, json!({"terms": ["fuel", "leaf", "gizmo"]}))
        .await;
    let result = outcome.result?;
    assert_eq!(
        result,
        json!({
            "meanings": {
                "fuel": "the CPU budget of a run",
                "leaf": "one agent call the host makes for the script",
                "gizmo": null,
            },
            "strict": "AgentError: no entry for \"epoch\"",
        })
    );
    assert_eq!(outcome.summary.leaves, 4);
    println!("{result:#}");

    // The same script on the offline placeholder backend, for comparison.
    let offline = Runtime::builder().backend(FakeBackend::new()).build()?;
    let outcome = offline.run(script, json!({"terms": ["gizmo"]})).await;
    println!("on FakeBackend: {}", outcome.result?);
    Ok(())
}

/// `cargo test` runs the example (Cargo.toml: `test = true`).
#[cfg(test)]
#[test]
fn the_example_runs() {
    main().expect("the example succeeds");
}
