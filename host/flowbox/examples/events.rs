//! Follow a run as it happens: `Runtime::subscribe` gives a stream of typed events (run
//! started, phases, logs, leaves started and finished with their place in the script's
//! `parallel`/`pipeline` tree, run finished). Here they are printed as JSON Lines.
//!
//! `cargo run --release -p flowbox --example events`

use flowbox::backends::FakeBackend;
use flowbox::{EventKind, Runtime};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = Runtime::builder().backend(FakeBackend::new()).build()?;
    // Subscribe before the run starts: a stream sees the runs started after it.
    let mut events = runtime.subscribe();
    let follower = tokio::spawn(async move {
        let mut kinds = Vec::new();
        while let Some(event) = events.recv().await {
            println!(
                "{}",
                serde_json::to_string(&event).expect("events serialise")
            );
            let finished = matches!(event.kind, EventKind::RunFinished { .. });
            kinds.push(event.kind);
            if finished {
                break;
            }
        }
        kinds
    });

    let script = r#"
meta = {"name": "triage", "description": "Sort tickets", "phases": [{"title": "sort"}]}

async def main():
    phase("sort")
    labels = await parallel([lambda t=t: agent(f"Label: {t}") for t in args["tickets"]])
    log(f"{len(labels)} tickets labelled")
    return labels
"#;
    let outcome = runtime
        .run(script, json!({"tickets": ["crash on start", "typo"]}))
        .await;
    outcome.result?;
    let kinds = follower.await?;

    let leaves_started = kinds
        .iter()
        .filter(|k| matches!(k, EventKind::LeafStarted { path, .. } if path.len() == 1))
        .count();
    let leaves_finished = kinds
        .iter()
        .filter(|k| matches!(k, EventKind::LeafFinished { ok: true, .. }))
        .count();
    assert!(matches!(&kinds[0], EventKind::RunStarted { name: Some(n), .. } if n == "triage"));
    assert!(kinds.contains(&EventKind::Phase {
        title: "sort".into()
    }));
    assert!(kinds.contains(&EventKind::Log {
        message: "2 tickets labelled".into()
    }));
    assert_eq!((leaves_started, leaves_finished), (2, 2));
    assert!(matches!(
        kinds.last(),
        Some(EventKind::RunFinished { ok: true, .. })
    ));
    Ok(())
}

/// `cargo test` runs the example (Cargo.toml: `test = true`).
#[cfg(test)]
#[test]
fn the_example_runs() {
    main().expect("the example succeeds");
}
