//! The shared loopback server (`flowbox_testkit`) speaking OpenAI's Chat Completions, for the
//! tests of real leaf agents and of `ask`'s root model.

use flowbox_testkit::{Reply, TestServer};
use serde_json::{Value, json};

/// A Chat Completions server answering from the request's content and recording each request,
/// serving until dropped.
pub(crate) struct ChatServer {
    /// The base URL to pass as `--base-url`.
    pub url: String,
    server: TestServer,
}

impl ChatServer {
    pub(crate) fn start() -> Self {
        let server = TestServer::answering(|request| {
            let (status, reply) = ChatServer::answer(&request.json());
            let reply = Reply::json(status, reply);
            // A rate limit asks for a 30-second pause.
            match status {
                429 => reply.header("Retry-After", "30"),
                _ => reply,
            }
        });
        let url = format!("{}/v1", server.url());
        Self { url, server }
    }

    /// Answers the next request with `status` and a provider's error, then goes on answering.
    pub(crate) fn fail_next(&self, status: u16) {
        self.server.push(Reply::json(
            status,
            json!({"error": {"message": "Try again later", "type": "server_error"}}),
        ));
    }

    /// Each request's path, authorization header and JSON body, oldest first.
    pub(crate) fn requests(&self) -> Vec<(String, String, Value)> {
        self.server
            .requests()
            .iter()
            .map(|request| {
                let auth = request.header("authorization").unwrap_or("").to_owned();
                (request.path.clone(), auth, request.json())
            })
            .collect()
    }

    fn answer(request: &Value) -> (u16, Value) {
        let messages = request["messages"].as_array().unwrap();
        let user = messages
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or("")
            .to_owned();
        let usage = json!({"prompt_tokens": 11, "completion_tokens": 7});
        let message = if let Some(tool) = messages.iter().find(|m| m["role"] == "tool") {
            json!({"role": "assistant", "content": format!("the file says {}", tool["content"].as_str().unwrap())})
        } else if request.get("response_format").is_some() {
            json!({"role": "assistant", "content": "{\"score\": 4}"})
        } else if user.contains("plan a workflow") {
            let script = json!({"script": "return await agent('inner leaf')"}).to_string();
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "run_workflow", "arguments": script}
            }]})
        } else if user.contains("use the tool") {
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\": \"notes/todo.txt\"}"}
            }]})
        } else {
            json!({"role": "assistant", "content": format!("{} via {}", user, request["model"].as_str().unwrap())})
        };
        // A request to write at length runs into the output-token limit.
        let finish = if user.contains("at length") {
            "length"
        } else {
            "stop"
        };
        if user.contains("rate limited") {
            return (
                429,
                json!({"error": {"message": "Rate limit reached", "type": "requests"}}),
            );
        }
        (
            200,
            json!({"choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}),
        )
    }
}
