//! `--events FILE|-`: every event of the runtime (or of a relay of a run on Restate) as JSON
//! Lines — a record, so it reads a lossless stream ([`flowbox::Runtime::subscribe_lossless`]),
//! unlike the progress display.
//!
//! A reader slower than the run (a slow disk, a pipe its reader paused) makes the scripts' `log`
//! calls wait, never a leaf, and memory stays bounded by the runtime's event capacity (4096
//! events) plus a leaf's few events each. The writer runs on a blocking thread, so a full pipe
//! stalls nothing but it, and batches its writes, flushing whenever the run pauses.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use flowbox::{Event, EventStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Buffered bytes a reader waits for at most when events keep coming.
const BUFFER_BYTES: usize = 64 << 10;
/// How long the writer waits for more events before it flushes what it holds.
const FLUSH_AFTER: Duration = Duration::from_millis(50);

/// A running JSON Lines writer.
pub(crate) struct EventLog {
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

/// Starts writing `events` (a lossless stream) to `target`: a file path, or `-` for stdout
/// unless `json` (one object) already owns stdout.
pub(crate) fn spawn(target: &PathBuf, events: EventStream, json: bool) -> anyhow::Result<EventLog> {
    let out: Box<dyn Write + Send> = if target.as_os_str() == "-" {
        if json {
            anyhow::bail!("--json prints one object on stdout; write --events to a file with it");
        }
        Box::new(std::io::stdout())
    } else {
        Box::new(
            std::fs::File::create(target)
                .with_context(|| format!("cannot write events to {}", target.display()))?,
        )
    };
    let out = std::io::BufWriter::with_capacity(BUFFER_BYTES, out);
    let (stop, stopped) = oneshot::channel();
    let runtime = tokio::runtime::Handle::current();
    // Writes block (a pipe nobody reads); on a blocking thread they hold up no async task.
    let task =
        tokio::task::spawn_blocking(move || runtime.block_on(write_all(events, out, stopped)));
    Ok(EventLog { stop, task })
}

/// Writes every event until `stopped`, then what is still queued. Returning (an error) drops
/// the stream, which releases the scripts waiting on it.
async fn write_all(
    mut events: EventStream,
    mut out: impl Write,
    mut stopped: oneshot::Receiver<()>,
) -> std::io::Result<()> {
    let mut unflushed = false;
    loop {
        let next = match events.try_recv() {
            Some(event) => Some(event),
            None if unflushed => {
                match tokio::time::timeout(FLUSH_AFTER, next(&mut events, &mut stopped)).await {
                    Ok(next) => next,
                    Err(_) => {
                        // The run paused: let a reader see everything so far.
                        out.flush()?;
                        unflushed = false;
                        continue;
                    }
                }
            }
            None => next(&mut events, &mut stopped).await,
        };
        let Some(event) = next else { break };
        write_line(&mut out, &event)?;
        unflushed = true;
    }
    // Everything the run published is already queued: write it and stop.
    while let Some(event) = events.try_recv() {
        write_line(&mut out, &event)?;
    }
    out.flush()
}

/// The next event, or `None` once told to stop (or the runtime is gone).
async fn next(events: &mut EventStream, stopped: &mut oneshot::Receiver<()>) -> Option<Event> {
    tokio::select! {
        event = events.recv() => event,
        _ = stopped => None,
    }
}

fn write_line(out: &mut impl Write, event: &Event) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, event)?;
    out.write_all(b"\n")
}

impl EventLog {
    /// Writes the events still queued, flushes, and stops. A reader of `-` that stopped
    /// reading (`| head`) is not a failure.
    pub(crate) async fn finish(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        match self.task.await.context("the event writer failed")? {
            Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(error).context("cannot write events")
            }
            _ => Ok(()),
        }
    }
}
