//! The `flowbox` command: parse arguments, call the library, print, and map errors to exit
//! codes. One module per subcommand.

mod ask;
mod check;
mod events;
mod options;
mod progress;
mod resume;
mod run;
mod show;
mod text;
mod threads;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit codes, as documented in `--help` and the README.
const AFTER_HELP: &str = "\
Exit codes:
  0  success
  1  the script failed (an uncaught exception, a result that is not JSON)
  2  the input was rejected before running (usage, size, syntax, meta, forbidden construct)
  3  a limit was breached (fuel, memory, time, output size)";

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
    Run(run::RunArgs),
    /// Ask a root agent, which answers directly or writes and runs workflows.
    Ask(ask::AskArgs),
    /// Resume an interrupted thread from its journal (a finished one prints its outcome).
    Resume(resume::ResumeArgs),
    /// List the journaled threads, newest first.
    Threads(threads::ThreadsArgs),
    /// Show one thread's journal and outcome.
    Show(show::ShowArgs),
    /// Check a script (syntax, meta, guard) without running it, and print its meta.
    Check(check::CheckArgs),
}

/// A failure with the exit code it maps to.
#[derive(Debug)]
pub(crate) struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
}

impl Failure {
    /// Input the user must fix before anything can run (exit code 2).
    pub(crate) fn input(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: 2,
            error: error.into(),
        }
    }

    /// The runtime could not be set up (exit code 1).
    pub(crate) fn setup(error: flowbox::SetupError) -> Self {
        Self {
            code: 1,
            error: error.into(),
        }
    }

    /// A run error, with the code its kind maps to.
    pub(crate) fn run(error: flowbox::RunError) -> Self {
        Self {
            code: u8::try_from(error.exit_code()).unwrap_or(1),
            error: error.into(),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(args).await,
            Command::Ask(args) => ask::ask(args).await,
            Command::Resume(args) => resume::resume(args).await,
            Command::Threads(args) => threads::threads(args).await,
            Command::Show(args) => show::show(args).await,
            Command::Check(args) => check::check(args).await,
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!(
                "error: {}",
                text::terminal_safe(&format!("{:#}", failure.error))
            );
            ExitCode::from(failure.code)
        }
    }
}
