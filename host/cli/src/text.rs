//! Text from scripts and models, made safe for a terminal.
//!
//! Log lines, phase titles, labels and error messages come from LLM-written scripts; printed
//! raw, an escape sequence among them could move the cursor, rewrite the screen or set the
//! clipboard. Control characters other than newline and tab are shown as `\u{..}` escapes.

use std::borrow::Cow;

/// `text` with every control character except `\n` and `\t` escaped.
pub(crate) fn terminal_safe(text: &str) -> Cow<'_, str> {
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
pub(crate) fn preview(text: &str, max_chars: usize) -> String {
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
}
