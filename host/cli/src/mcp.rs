//! `flowbox mcp`: the flags of the Model Context Protocol server, wired to `flowbox_mcp` —
//! over stdio, or Streamable HTTP with `--listen` — so an agent host (a coding agent, a desktop
//! chat app, an IDE) can run the workflows its model writes. Runs go through the same
//! [`flowbox::Runtime`] as `flowbox run`, built from the same flags.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use flowbox_mcp::{Sampling, ServeError, Server};

use crate::Failure;
use crate::options::{DoorOptions, JournalOptions, RunOptions, door_failure};
use crate::options::{Journal, TraceOptions, build_runtime_with};

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
    #[arg(long, value_name = "ADDR", value_parser = parse_listen)]
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
    #[arg(long, value_name = "SECS", default_value_t = flowbox_mcp::DEFAULT_TASK_TTL.as_secs())]
    task_ttl: u64,
    /// Who may connect with --listen, and how long a client may take.
    #[command(flatten, next_help_heading = "With --listen")]
    door: DoorOptions,
    #[command(flatten)]
    options: RunOptions,
    #[command(flatten)]
    journal: JournalOptions,
    #[command(flatten)]
    trace: TraceOptions,
}

/// Serves MCP on stdin/stdout until the client closes stdin (or over HTTP with `--listen`);
/// messages for people go to stderr.
pub(crate) async fn mcp(args: McpArgs) -> Result<u8, Failure> {
    let door = match args.listen {
        Some(_) => Some(args.door.door()?),
        None if args.door.given() => {
            return Err(Failure::input(anyhow::anyhow!(
                "--token-file, --allow-origin, --insecure, --max-connections, --read-timeout \
                 and --idle-timeout are for --listen; over stdio only the client that started \
                 the server talks to it"
            )));
        }
        None => None,
    };
    let mut sampling = None;
    let backend = &args.options.backend;
    let runtime = build_runtime_with(
        &args.options,
        Some(Journal::Create(&args.journal)),
        |backends| {
            if args.leaves == "sampling" {
                let config = backend.agent_config_on("host", &backends.tools)?;
                let leaves = Sampling::new(config, backends.tools.clone());
                backends.leaf = leaves.backend();
                sampling = Some(leaves);
            }
            Ok(())
        },
    )?
    .warm_pool(args.warm_pool)
    .otlp(args.trace.otlp()?)
    .build()
    .map_err(Failure::setup)?;
    let mut server = Server::builder(runtime)
        .patterns(args.patterns)
        .task_ttl(Duration::from_secs(args.task_ttl));
    if let Some(sampling) = sampling {
        server = server.sampling(sampling);
    }
    let server = server.build();
    if let (Some(addr), Some(door)) = (args.listen, door) {
        return match server
            .serve_http(addr, &door, |local| {
                err!("flowbox mcp: listening on http://{local}/mcp");
                err!("flowbox mcp: {}", door.scope(local));
            })
            .await
        {
            Ok(()) => Ok(0),
            Err(error @ ServeError::Listen { .. }) => Err(Failure::input(error)),
            Err(ServeError::Door(error @ flowbox_door::DoorError::Io(_))) => {
                Err(Failure::output(error.into()))
            }
            Err(ServeError::Door(error)) => Err(door_failure(error)),
            Err(error) => Err(Failure::output(error.into())),
        };
    }
    match server.serve_stdio().await {
        Ok(served) => {
            if served.cancelled > 0 {
                err!(
                    "flowbox mcp: the client left; {} running call(s) cancelled, their threads \
                     resumable",
                    served.cancelled
                );
            }
            Ok(0)
        }
        // A client that leaves before the handshake is not a failure of the server.
        Err(error @ ServeError::Handshake(_)) => {
            err!("flowbox mcp: {error}");
            Ok(0)
        }
        Err(error) => Err(Failure::output(error.into())),
    }
}

/// Where `--listen` listens: `HOST:PORT`, or a bare `PORT` on the loopback address.
fn parse_listen(value: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = value.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    value.parse().map_err(|_| {
        format!("expected PORT or HOST:PORT, such as 8000 or 127.0.0.1:8000, not {value:?}")
    })
}
