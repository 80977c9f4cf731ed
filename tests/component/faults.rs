//! A backend that panics is a host bug in one leaf, not in the run: the script sees an
//! `AgentError` it can catch, and the runtime keeps serving runs.

use std::sync::Arc;

use flowbox::Limits;
use flowbox_tests::{PanickingBackend, result_of, runtime_with};
use serde_json::json;

#[tokio::test]
async fn a_panicking_backend_is_an_agent_error_the_script_catches() {
    let rt = runtime_with(Arc::new(PanickingBackend::on("x")), Limits::default());
    let caught = "try:\n    await agent('x')\nexcept AgentError as e:\n    return str(e)\nreturn 'no error'\n";
    let message = result_of(&rt, caught).await;
    let message = message
        .as_str()
        .expect("the script returns the error's text");
    assert!(
        message.contains("panicked") && message.contains("backend bug on purpose"),
        "{message}"
    );
    // The same runtime (and backend) serves the next run, and the next panic, as before.
    assert_eq!(
        result_of(&rt, "return await agent('still here')").await,
        json!("[fake leaf] still here")
    );
    assert_eq!(result_of(&rt, caught).await, json!(message));
}
