//! The `flowbox` command: parse arguments, call the library, print, and map errors to exit
//! codes. One module per subcommand.

/// `println!` for the command's output on stdout, except that a reader who stopped reading
/// (`flowbox threads | head -1`) is no reason to panic.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::write_out(format_args!($($arg)*))
    };
}

/// `eprintln!` for messages to the person at the terminal, except that a stderr nobody can
/// write to (`2>/dev/full`, a closed pipe) never stops the command: the message is dropped.
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::write_err(format_args!($($arg)*))
    };
}

mod ask;
mod check;
mod events;
mod follow;
mod guest;
mod guidance;
mod mcp;
mod options;
mod plan;
mod progress;
mod report;
mod restate;
mod resume;
mod run;
mod serve;
mod show;
mod threads;
mod workflows;

use std::sync::atomic::{AtomicU8, Ordering};

use clap::{Parser, Subcommand};
use flowbox::{RunErrorClass, RunErrorKind};

/// Exit codes, as documented in `--help` and `docs/cli.md`.
const AFTER_HELP: &str = "\
Exit codes:
  0  success
  1  the script failed (an uncaught exception, a result that is not JSON), or the run could
     not finish (the journal failed or proved damaged during the run, a divergence from the
     journal: resume once fixed); `threads` listed all but a damaged thread
  2  the input was rejected before running (usage, a limit out of range, size, syntax, meta,
     forbidden construct, unknown thread, a thread another run is driving, a journal that
     cannot be used: missing, not a regular file, another application's, damaged, newer,
     not writable, a price table that is invalid or lacks a model, a run the pre-launch gate
     refused: --gate-leaves, --gate-usd)
  3  a limit was breached (fuel, memory, time, stack, output or result size)";

/// Run LLM-written workflow scripts in a bounded, isolated Python sandbox.
#[derive(Debug, Parser)]
#[command(name = "flowbox", version, after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a workflow script and print its result.
    #[command(after_help = AFTER_HELP)]
    Run(run::RunArgs),
    /// Ask a root agent, which answers directly or writes and runs workflows.
    Ask(ask::AskArgs),
    /// Resume an interrupted thread from its journal (a finished one prints its outcome).
    #[command(after_help = AFTER_HELP)]
    Resume(resume::ResumeArgs),
    /// List the journaled threads, newest first.
    Threads(threads::ThreadsArgs),
    /// Show one thread's journal and outcome.
    Show(show::ShowArgs),
    /// Serve a live web view of the journal's threads, and its JSON API under /api/.
    Serve(serve::ServeArgs),
    /// Check a script (syntax, meta, guard) without running it, and print its meta.
    Check(check::CheckArgs),
    /// Plan a script without running it: leaves, fan-outs, waves, tokens and dollars per phase
    /// and per profile, from a run against instant placeholder leaves (nothing is called).
    #[command(after_help = AFTER_HELP)]
    Plan(plan::PlanArgs),
    /// List the workflow runs root agents started, per conversation or in total.
    Workflows(workflows::WorkflowsArgs),
    /// Print the guidance a root model gets on this host (what `ask` gives its root agent):
    /// the script contract, the profiles, templates, tools and limits the flags configure.
    Guidance(guidance::GuidanceArgs),
    /// Serve flowbox's Restate services (the workflow service, the leaf service) and register
    /// them with a Restate server.
    Worker(restate::WorkerArgs),
    /// Wait for (or print) the outcome of a run submitted to Restate (`run --restate`).
    #[command(after_help = AFTER_HELP)]
    Attach(restate::AttachArgs),
    /// Serve the workflow tools to an agent host over the Model Context Protocol (stdio, or
    /// Streamable HTTP with --listen).
    Mcp(mcp::McpArgs),
}

impl Command {
    /// Whether the command was asked for exactly one JSON object on stdout.
    fn json(&self) -> bool {
        match self {
            Self::Run(args) => args.json,
            Self::Resume(args) => args.json,
            Self::Ask(args) => args.json,
            Self::Plan(args) => args.json,
            Self::Attach(args) => args.json,
            Self::Worker(_)
            | Self::Threads(_)
            | Self::Show(_)
            | Self::Serve(_)
            | Self::Check(_)
            | Self::Workflows(_)
            | Self::Guidance(_)
            | Self::Mcp(_) => false,
        }
    }

    /// Whether the command serves until stopped: its tasks may still hold runs (and their
    /// traces' last spans) when it returns.
    fn serves(&self) -> bool {
        matches!(self, Self::Serve(_) | Self::Mcp(_) | Self::Worker(_))
    }
}

/// A failure with the exit code it maps to.
#[derive(Debug)]
pub(crate) struct Failure {
    pub code: u8,
    /// The error kind `--json` reports.
    pub kind: FailureKind,
    pub error: anyhow::Error,
}

/// What failed, as `--json`'s `error.kind` names it: a run error's own kind, else the
/// command's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailureKind {
    /// The run ended with this error.
    Run(RunErrorKind),
    /// Input the user must fix (`input`).
    Input,
    /// The runtime could not be set up (`setup`).
    Setup,
    /// The output could not be written (`output`).
    Output,
    /// `ask`'s root agent failed (`root_agent`).
    RootAgent,
    /// Restate could not be asked, or failed the run (`restate`).
    Restate,
}

impl FailureKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Run(kind) => kind.as_str(),
            Self::Input => "input",
            Self::Setup => "setup",
            Self::Output => "output",
            Self::RootAgent => "root_agent",
            Self::Restate => "restate",
        }
    }
}

impl Failure {
    /// Input the user must fix before anything can run (exit code 2).
    pub(crate) fn input(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: 2,
            kind: FailureKind::Input,
            error: error.into(),
        }
    }

    /// There is no such thread (exit code 2): `unknown_thread`, whether the journal lacks it
    /// or there is no journal at all.
    pub(crate) fn unknown_thread(error: anyhow::Error) -> Self {
        Self {
            code: 2,
            kind: FailureKind::Run(RunErrorKind::UnknownThread),
            error,
        }
    }

    /// The journal cannot be opened: missing, damaged, another application's, not writable
    /// (exit code 2, with the other unusable input).
    pub(crate) fn journal(error: flowbox::store::StoreError) -> Self {
        Self::input(error)
    }

    /// The output could not be written, after the work was done (exit code 1).
    pub(crate) fn output(error: anyhow::Error) -> Self {
        Self {
            code: 1,
            kind: FailureKind::Output,
            error,
        }
    }

    /// The runtime could not be set up (exit code 1).
    pub(crate) fn setup(error: flowbox::SetupError) -> Self {
        Self {
            code: 1,
            kind: FailureKind::Setup,
            error: error.into(),
        }
    }

    /// A run error, with the code its class maps to.
    pub(crate) fn run(error: flowbox::RunError) -> Self {
        Self {
            code: exit_code(&error),
            kind: FailureKind::Run(error.kind()),
            error: error.into(),
        }
    }

    /// The failure as the one object `--json` promises, shaped like a run's outcome.
    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "ok": false,
            "result": null,
            "error": {"kind": self.kind.as_str(), "message": format!("{:#}", self.error)},
            "summary": null,
        })
    }
}

/// The exit code of a run error, by its class (as `AFTER_HELP` documents).
pub(crate) fn exit_code(error: &flowbox::RunError) -> u8 {
    match error.class() {
        RunErrorClass::Script | RunErrorClass::Machinery => 1,
        RunErrorClass::Rejected => 2,
        RunErrorClass::Limit => 3,
    }
}

fn main() {
    guest::loaded_while(std::env::args_os(), command)
}

/// The command the command line names, to its end: it ends the process with the command's
/// exit code.
fn command() -> ! {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => std::process::exit(usage_error(error)),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            err!("error: cannot start the async runtime: {error}");
            std::process::exit(1)
        }
    };
    let json = cli.command.json();
    let serves = cli.command.serves();
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(args).await,
            Command::Ask(args) => ask::ask(args).await,
            Command::Resume(args) => resume::resume(args).await,
            Command::Threads(args) => threads::threads(args).await,
            Command::Show(args) => show::show(args).await,
            Command::Serve(args) => serve::serve(args).await,
            Command::Check(args) => check::check(args).await,
            Command::Plan(args) => plan::plan(args).await,
            Command::Workflows(args) => workflows::workflows(args).await,
            Command::Guidance(args) => guidance::guidance(args).await,
            Command::Worker(args) => restate::worker(args).await,
            Command::Attach(args) => restate::attach(args).await,
            Command::Mcp(args) => mcp::mcp(args).await,
        }
    });
    if serves {
        // Dropping the server's tasks drops their runs, and with the last the tracer, which
        // exports what it still holds; a tool call stuck in a blocking read is left behind.
        runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    }
    let code = match result {
        // A result nobody could read is not a success.
        Ok(0) if STDOUT.load(Ordering::Relaxed) == STDOUT_FAILED => 1,
        Ok(code) => code,
        Err(failure) => {
            if json {
                out!("{}", failure.to_json());
            }
            err!(
                "error: {}",
                flowbox::store::view::terminal_safe(&format!("{:#}", failure.error))
            );
            failure.code
        }
    };
    // Any other command has written its output, committed its journal and flushed its traces
    // by now, so the process ends without stopping tokio's threads one by one (~0.7 ms of a
    // one-shot run) or waiting for a tool call stuck in a blocking read.
    std::process::exit(i32::from(code))
}

/// What became of stdout: [`STDOUT_OPEN`], [`STDOUT_GONE`] (its reader stopped reading: later
/// output is dropped) or [`STDOUT_FAILED`] (writing failed otherwise: the command fails).
static STDOUT: AtomicU8 = AtomicU8::new(STDOUT_OPEN);
const STDOUT_OPEN: u8 = 0;
const STDOUT_GONE: u8 = 1;
const STDOUT_FAILED: u8 = 2;

/// Writes one line of output to stdout; see [`out!`]. When the reader has gone, the line is
/// dropped and the command still ends with its own exit code.
fn write_out(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    if STDOUT.load(Ordering::Relaxed) != STDOUT_OPEN {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_fmt(line)
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush());
    match written {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
            STDOUT.store(STDOUT_GONE, Ordering::Relaxed);
        }
        Err(error) => {
            STDOUT.store(STDOUT_FAILED, Ordering::Relaxed);
            err!("error: cannot write the output: {error}");
        }
    }
}

/// Writes one line to stderr; see [`err!`]. Failing to write a message is not worth failing
/// the command for: its outcome is in the exit code and on stdout.
fn write_err(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stderr = std::io::stderr().lock();
    let _ = stderr
        .write_fmt(line)
        .and_then(|()| stderr.write_all(b"\n"));
}

/// Reports a command line clap refused (or prints help and the version). With `--json` among
/// the arguments the refusal is also the one JSON object on stdout.
fn usage_error(error: clap::Error) -> i32 {
    use clap::error::ErrorKind;
    let refused = !matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if refused && std::env::args_os().any(|arg| arg == "--json") {
        let message = error.render().to_string();
        let message = message.trim().trim_start_matches("error: ");
        out!("{}", Failure::input(anyhow::anyhow!("{message}")).to_json());
    }
    // clap prints help and version on stdout and refusals on stderr, with exit codes 0 and 2.
    let _ = error.print();
    error.exit_code()
}
