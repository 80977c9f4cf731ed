//! Text from scripts, cut to size: log lines, phase titles and error messages keep to their
//! limits wherever they go (events, the journal, the JSON output, a root model's context).

/// `text` cut to at most `limit` bytes (on a character boundary), with a marker saying how
/// much was left out.
pub(crate) fn clip(mut text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    let total = text.len();
    let cut = text.floor_char_boundary(limit);
    text.truncate(cut);
    text.push_str(&format!("… [{} more bytes cut]", total - cut));
    text
}
