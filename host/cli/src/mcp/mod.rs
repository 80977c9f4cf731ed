//! `flowbox mcp`: a Model Context Protocol server over stdio, so an agent host (a coding agent,
//! a desktop chat app, an IDE) can run the workflows its model writes. The tools are in
//! [`server`], their schemas in [`tools`], what a running call tells its client (progress,
//! the script's log lines) in [`progress`], and the leaves answered by the client's model in
//! [`sampling`] (2025-11-25) and [`stateless`] (2026-07-28), and long calls run as tasks in
//! [`tasks`]. Runs go through the same [`flowbox::Runtime`] as
//! `flowbox run`, built from the same flags.

mod http;
mod progress;
mod sampling;
mod server;
mod stateless;
mod stdin;
mod tasks;
mod tools;

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use flowbox::backends::AgentBackend;
use rmcp::ServiceExt;

use crate::Failure;
use crate::options::{JournalOptions, RunOptions};
use crate::run::{Journal, build_runtime_with};

/// How long the server waits, once the client has gone, for the runs it cancelled to let go of
/// their threads (journal writes finish; leaves in flight are dropped).
const DRAIN: Duration = Duration::from_secs(10);

/// Arguments of `flowbox mcp`.
#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// Add the pattern library (fan-out, pipeline, review loop, plan-execute-check templates)
    /// to the workflow guidance the server sends as its instructions.
    #[arg(long)]
    patterns: bool,
    /// Guests kept instantiated ahead of the next run (0 turns the warm pool off): a tool
    /// call then starts without paying for an instantiation, nor (on Linux) for the page
    /// faults of its first writes to the guest's memory. Each ready guest holds ~12 MiB of
    /// memory, ~2 MiB of it resident.
    #[arg(long, value_name = "N", default_value_t = 2)]
    warm_pool: usize,
    /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio, for several clients at
    /// once: `PORT` (on 127.0.0.1) or `HOST:PORT`. The address is printed on stderr.
    #[arg(long, value_name = "ADDR", value_parser = http::parse_listen)]
    listen: Option<std::net::SocketAddr>,
    /// Who answers leaves: `backend` (the --backend flag's) or `sampling` (the client's own
    /// model, which must declare the sampling capability; tokens are counted where the client
    /// reports them in the result's `_meta.usage`, estimated otherwise). A 2025-11-25 client
    /// gets a sampling/createMessage request per model turn of a leaf; a 2026-07-28 client
    /// gets an input-required result with the requests of every leaf waiting, and retries the
    /// call with the answers.
    #[arg(long, value_name = "WHO", default_value = "backend", value_parser = ["backend", "sampling"])]
    leaves: String,
    /// How long a finished task (a call of a 2026-07-28 client that declared the tasks
    /// extension) answers `tasks/get`, in seconds after it finished; its thread stays in the
    /// journal after that.
    #[arg(long, value_name = "SECS", default_value_t = tasks::DEFAULT_TTL_SECS)]
    task_ttl: u64,
    #[command(flatten)]
    options: RunOptions,
    #[command(flatten)]
    journal: JournalOptions,
}

/// Serves MCP on stdin/stdout until the client closes stdin (or over HTTP with `--listen`);
/// messages for people go to stderr. A line that is not JSON is skipped, a JSON value that is not a JSON-RPC message is
/// answered with an Invalid Request error, and neither ends the server.
pub(crate) async fn mcp(args: McpArgs) -> Result<u8, Failure> {
    let clients = Arc::new(sampling::Clients::default());
    let rounds = Arc::new(stateless::Rounds::default());
    let sampled = args.leaves == "sampling";
    let journal = Some(Journal::Create(&args.journal));
    let backend = &args.options.backend;
    let runtime = build_runtime_with(&args.options, journal, |backends| {
        if sampled {
            let sessions = Arc::new(sampling::SamplingChat::new(Arc::clone(&clients)));
            let chat = Arc::new(stateless::BatchChat::new(Arc::clone(&rounds), sessions));
            let config = backend.agent_config_on("host", &backends.tools)?;
            let agents = AgentBackend::new(chat, config, backends.tools.clone());
            let leaves = stateless::Leaves::new(Arc::new(agents), Arc::clone(&rounds));
            backends.leaf = Arc::new(leaves);
        }
        Ok(())
    })?
    .warm_pool(args.warm_pool)
    .build()
    .map_err(Failure::setup)?;
    let gone = Arc::new(stdin::ClientGone::default());
    let server = server::Server::new(
        runtime,
        args.patterns,
        Arc::clone(&gone),
        sampled.then_some((clients, rounds)),
        Duration::from_secs(args.task_ttl),
    );
    if let Some(addr) = args.listen {
        return http::serve(server, addr).await;
    }
    let transport = (
        stdin::Watched::new(tokio::io::stdin(), gone),
        tokio::io::stdout(),
    );
    let service = match server.clone().serve(transport).await {
        Ok(service) => service,
        Err(error) => {
            // A client that leaves before the handshake is not a failure of the server.
            err!("flowbox mcp: the client left before initializing: {error}");
            return Ok(0);
        }
    };
    let _ = service.waiting().await;
    // The client has gone: the calls still running were cancelled when stdin closed; their
    // threads stay in the journal, resumable.
    let cancelled = server.cancelled_on_exit();
    server.drained(DRAIN).await;
    if cancelled > 0 {
        err!(
            "flowbox mcp: the client left; {cancelled} running call(s) cancelled, their threads \
             resumable"
        );
    }
    Ok(0)
}
