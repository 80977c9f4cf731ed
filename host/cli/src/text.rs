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
}
