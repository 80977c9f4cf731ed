//! Embed a runtime and run a fan-out workflow on offline placeholder leaves.
//!
//! `cargo run --release -p flowbox --example embed`. This file is also the crate
//! documentation's example, which `cargo test` runs as a doctest, and the program the
//! out-of-tree build test runs.

use flowbox::Runtime;
use flowbox::backends::FakeBackend;
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // One runtime per process. Its leaves are answered by placeholders, chosen explicitly:
    // a runtime has no default backend (real agents: `flowbox::backends::AgentBackend`).
    let runtime = Runtime::builder().backend(FakeBackend::new()).build()?;
    let script = r#"
reviews = await parallel([lambda f=f: agent(f"Review {f}", label=f) for f in args["files"]])
return {"files": args["files"], "reviews": reviews}
"#;
    let outcome = runtime
        .run(script, json!({"files": ["a.rs", "b.rs"]}))
        .await;
    let result = outcome.result?;
    assert_eq!(
        result,
        json!({
            "files": ["a.rs", "b.rs"],
            "reviews": ["[fake a.rs] Review a.rs", "[fake b.rs] Review b.rs"],
        })
    );
    assert_eq!(outcome.summary.leaves, 2);
    println!("{result}");
    println!(
        "{} leaves, {} tokens",
        outcome.summary.leaves, outcome.summary.tokens_spent
    );
    Ok(())
}
