//! `--events FILE|-`: every event of the runtime as JSON Lines, one more consumer of the same
//! stream the progress display reads.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use flowbox::EventStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running JSON Lines writer.
pub(crate) struct EventLog {
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

/// Starts writing `events` to `target`: a file path, or `-` for stdout unless `json` (one
/// object) already owns stdout.
pub(crate) fn spawn(
    target: &PathBuf,
    mut events: EventStream,
    json: bool,
) -> anyhow::Result<EventLog> {
    let mut out: Box<dyn Write + Send> = if target.as_os_str() == "-" {
        if json {
            anyhow::bail!("--json prints one object on stdout; write --events to a file with it");
        }
        Box::new(std::io::stdout())
    } else {
        Box::new(std::io::BufWriter::new(
            std::fs::File::create(target)
                .with_context(|| format!("cannot write events to {}", target.display()))?,
        ))
    };
    let (stop, mut stopped) = oneshot::channel();
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Some(event) => writeln!(out, "{}", serde_json::to_string(&event)?)?,
                    None => break,
                },
                _ = &mut stopped => {
                    // Everything the run published is already queued: write it and stop.
                    while let Some(event) = events.try_recv() {
                        writeln!(out, "{}", serde_json::to_string(&event)?)?;
                    }
                    break;
                }
            }
        }
        out.flush()
    });
    Ok(EventLog { stop, task })
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
