//! A thread as people and tools read it: the table `flowbox threads` prints and MCP's
//! `list_threads` answers with, the lines of `flowbox show` and MCP's `show_thread`, and the
//! JSON object both print with `--json` / as structured content. Text from scripts and models
//! (names, labels, prompts, replies, messages) is made safe for a terminal on the way
//! ([`terminal_safe`]): printed raw, an escape sequence among it could move the cursor, rewrite
//! the screen or set the clipboard.

use std::borrow::Cow;

use serde::Serialize;

use crate::{
    CallRequest, Entry, EntryOutcome, Listing, RecordedOutcome, StoredThread, ThreadHeader,
    ThreadStatus, ThreadSummary, UtcTime,
};

/// `text` with every control character except `\n` and `\t` shown as a `\u{..}` escape.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| {
                if is_unsafe(c) {
                    c.escape_unicode().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

/// The first `max_chars` characters of `text`, terminal-safe, with `…` where it was cut.
pub fn preview(text: &str, max_chars: usize) -> String {
    let mut chars = text.chars();
    let shown: String = chars.by_ref().take(max_chars).collect();
    let mut out = terminal_safe(&shown).into_owned();
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

fn is_unsafe(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// The threads as `flowbox threads` prints them: a header line, then one line per thread.
pub fn table(threads: &[ThreadSummary]) -> Vec<String> {
    let mut lines = vec![format!(
        "{:<32} {:<24} {:<10} {:>7} {:>9}  started",
        "thread", "name", "status", "leaves", "tokens"
    )];
    for thread in threads {
        lines.push(format!(
            "{:<32} {:<24} {:<10} {:>7} {:>9}  {}",
            thread.thread_id,
            terminal_safe(thread.name.as_deref().unwrap_or("-")),
            thread.status,
            thread.leaves,
            thread.tokens,
            UtcTime::from_unix_millis(thread.created_unix_ms)
        ));
    }
    lines
}

/// A journal's threads as one JSON object (the web view's `/api/threads`, MCP's
/// `list_threads`): the threads that read, newest first, and a message per damaged one.
#[derive(Debug, Serialize)]
pub struct ThreadList {
    /// The threads that read.
    pub threads: Vec<ThreadSummary>,
    /// What is wrong with each thread that does not.
    pub damaged: Vec<String>,
}

impl From<Listing> for ThreadList {
    fn from(listing: Listing) -> Self {
        Self {
            threads: listing.threads,
            damaged: listing.damaged.iter().map(ToString::to_string).collect(),
        }
    }
}

/// A thread as one JSON object (`flowbox show --json`, MCP's `show_thread`): its header, name,
/// status, completions and outcome (`null` until it finished).
#[derive(Debug, Serialize)]
pub struct ThreadRecord<'a> {
    /// What the thread is: script, args, limits, start.
    pub header: &'a ThreadHeader,
    /// `meta.name`, when known.
    pub name: Option<&'a str>,
    /// Where it stands.
    pub status: ThreadStatus,
    /// The journaled completions, in delivery order.
    pub entries: &'a [Entry],
    /// How it ended.
    pub outcome: Option<&'a RecordedOutcome>,
}

impl<'a> From<&'a StoredThread> for ThreadRecord<'a> {
    fn from(thread: &'a StoredThread) -> Self {
        Self {
            header: &thread.header,
            name: thread.name.as_deref(),
            status: thread.status,
            entries: &thread.entries,
            outcome: thread.end.as_ref().map(|end| &end.outcome),
        }
    }
}

/// The thread as `flowbox show` prints it, line by line.
pub fn lines(thread: &StoredThread) -> Vec<String> {
    let mut lines = Vec::new();
    let header = &thread.header;
    lines.push(format!("thread   {}", header.thread_id));
    lines.push(format!(
        "name     {}",
        terminal_safe(thread.name.as_deref().unwrap_or("-"))
    ));
    lines.push(format!("status   {}", thread.status));
    lines.push(format!(
        "started  {}",
        UtcTime::from_unix_millis(header.created_unix_ms)
    ));
    lines.push(format!(
        "script   {} bytes, sha256 {}",
        header.script.len(),
        &header.script_sha256[..header.script_sha256.len().min(16)]
    ));
    lines.push(format!("args     {}", header.args));
    lines.push(format!("journal  {} completions", thread.entries.len()));
    for entry in &thread.entries {
        lines.push(entry_line(entry));
    }
    lines.push(match &thread.end {
        Some(end) => format!(
            "outcome  {}",
            terminal_safe(&serde_json::to_string_pretty(&end.outcome).expect("outcomes serialise"))
        ),
        None if thread.status == ThreadStatus::Running => {
            "outcome  (not finished: a run is driving it now)".to_owned()
        }
        None => format!(
            "outcome  (not finished: `flowbox resume {}` continues it)",
            header.thread_id
        ),
    });
    lines
}

/// One journaled completion: its position, what was called and what came back.
fn entry_line(entry: &Entry) -> String {
    let (status, detail) = match &entry.outcome {
        EntryOutcome::Ok { value } => ("ok", value.clone()),
        EntryOutcome::Err { kind, message, .. } => ("error", format!("{kind}: {message}")),
    };
    let what = match &entry.request {
        CallRequest::Tool(tool) => format!("tool {}({})", tool.name, tool.arguments),
        CallRequest::Agent(agent) => match &agent.label {
            Some(label) => label.clone(),
            None => agent.prompt.to_string(),
        },
    };
    // `~` marks a count with estimates in it (a client that reported no usage).
    let tokens = entry.input_tokens + entry.output_tokens;
    let tokens = match entry.estimated_tokens {
        0 => tokens.to_string(),
        _ => format!("~{tokens}"),
    };
    format!(
        "  #{:<4} batch {:<4} call {:<5} {:<6} {:>6} tok  {}  -> {}",
        entry.seq,
        entry.batch,
        entry.handle,
        status,
        tokens,
        preview(&what, 40),
        preview(&detail, 60)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_neutralised() {
        assert_eq!(terminal_safe("plain ü\n\tok"), "plain ü\n\tok");
        assert_eq!(
            terminal_safe("\u{1b}]52;c;aGk=\u{7}red"),
            "\\u{1b}]52;c;aGk=\\u{7}red"
        );
        assert_eq!(terminal_safe("a\rb\u{9b}c"), "a\\u{d}b\\u{9b}c");
    }

    #[test]
    fn previews_cut_at_characters_and_stay_terminal_safe() {
        assert_eq!(preview("héllo", 5), "héllo");
        assert_eq!(preview("héllo world", 5), "héllo…");
        assert_eq!(preview("\u{1b}[2Jok", 3), "\\u{1b}[2…");
    }

    #[test]
    fn a_table_pads_each_column_and_keeps_names_terminal_safe() {
        let thread = ThreadSummary {
            thread_id: "t1".into(),
            name: Some("evil\u{1b}[2J".into()),
            status: ThreadStatus::Resumable,
            leaves: 3,
            tokens: 120,
            cost_usd: None,
            created_unix_ms: 1_796_009_125_000,
            finished_unix_ms: None,
            duration_ms: 5,
        };
        let table = table(&[thread]);
        assert_eq!(table.len(), 2);
        assert!(table[1].starts_with("t1 "), "{}", table[1]);
        assert!(table[1].contains("resumable "), "{}", table[1]);
        assert!(table[1].contains("evil\\u{1b}[2J"), "{}", table[1]);
        assert!(table[1].ends_with("2026-11-30 03:25:25Z"), "{}", table[1]);
    }
}
