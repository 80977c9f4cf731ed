//! Which replies feed a leaf: the earlier leaves whose reply the script put, word for word, into
//! the new leaf's prompt or instruction — the edges of the run's graph (`leaf_started`'s
//! `fed_by`).
//!
//! Every leaf reply delivered to the guest is indexed: a text reply, or each string of a
//! structured one, of at least [`MIN_BYTES`] (a shorter text — a `yes`, a score — turns up in
//! prompts by chance). A new leaf's prompt strings are then scanned once: each of their
//! [`MIN_BYTES`]-byte windows is looked up among the indexed texts' first bytes, and a hit is
//! checked against the whole text by its hash, computed from the prompt's prefix hashes in
//! constant time; replies alike to the byte are one text with several leaves. So a scan costs
//! the prompt's length, plus a check per distinct reply starting alike at each place the prompt
//! holds such a start; nothing while no reply has come. A reply found only inside another one found (a plan quoted by the
//! drafts that a final prompt joins) fed that one, not the new leaf: it is left out.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use serde_json::Value;

use super::NumberHasher;

/// The shortest text that counts as a reply feeding a prompt, in bytes.
pub(super) const MIN_BYTES: usize = 16;

/// The most strings of one structured reply that are indexed.
const MAX_STRINGS_PER_REPLY: usize = 64;

/// The base of the polynomial hash (odd, so that it is invertible modulo 2⁶⁴).
const BASE: u64 = 0x100_0000_01b3;

/// An indexed text: its length, its hash and the leaves that replied it.
#[derive(Debug, Clone)]
struct Text {
    len: usize,
    hash: u64,
    calls: Vec<u64>,
}

/// The delivered replies' texts, by their first [`MIN_BYTES`] bytes.
#[derive(Debug, Default)]
pub(super) struct Feeds {
    by_start: HashMap<u128, Vec<Text>, BuildHasherDefault<NumberHasher>>,
    /// Where each text is in `by_start`'s list for its start, by its start, length and hash:
    /// replies that start alike (a fan-out's, often) are indexed in constant time each, not
    /// in time growing with how many came before.
    known: HashMap<(u128, usize, u64), usize, BuildHasherDefault<NumberHasher>>,
}

impl Feeds {
    /// Indexes the reply of leaf `call_id`, now in the script's hands.
    pub(super) fn delivered(&mut self, call_id: u64, reply: &Value) {
        let mut strings = Vec::new();
        collect_strings(reply, &mut strings);
        for text in strings.into_iter().take(MAX_STRINGS_PER_REPLY) {
            let bytes = text.as_bytes();
            let (start, len, hash) = (window(bytes), bytes.len(), hash(bytes));
            let alike = self.by_start.entry(start).or_default();
            match self
                .known
                .get(&(start, len, hash))
                .map(|&at| &mut alike[at])
            {
                Some(known) if known.calls.last() == Some(&call_id) => {}
                Some(known) => known.calls.push(call_id),
                None => {
                    self.known.insert((start, len, hash), alike.len());
                    alike.push(Text {
                        len,
                        hash,
                        calls: vec![call_id],
                    });
                }
            }
        }
    }

    /// The leaves whose replies `prompt` or `instruction` hold, in call order.
    pub(super) fn fed_by(&self, prompt: &Value, instruction: Option<&str>) -> Vec<u64> {
        if self.by_start.is_empty() {
            return Vec::new();
        }
        let mut strings = Vec::new();
        collect_strings(prompt, &mut strings);
        strings.extend(instruction.filter(|text| text.len() >= MIN_BYTES));
        let mut found = Vec::new();
        for text in strings {
            self.scan(text.as_bytes(), &mut found);
        }
        found.sort_unstable();
        found.dedup();
        found
    }

    fn scan(&self, text: &[u8], found: &mut Vec<u64>) {
        if text.len() < MIN_BYTES {
            return;
        }
        let mut prefixes: Option<Prefixes> = None;
        // (start, end, text): where each indexed text occurs.
        let mut spans: Vec<(usize, usize, &Text)> = Vec::new();
        for start in 0..=text.len() - MIN_BYTES {
            let Some(candidates) = self.by_start.get(&window(&text[start..])) else {
                continue;
            };
            let prefixes = prefixes.get_or_insert_with(|| Prefixes::of(text));
            for candidate in candidates {
                let end = start + candidate.len;
                if end <= text.len() && prefixes.hash(start, end) == candidate.hash {
                    spans.push((start, end, candidate));
                }
            }
        }
        // By start, the longest first: a span is inside another when one before it reaches as
        // far (no two spans are the same: leaves that replied alike share one text).
        spans.sort_unstable_by_key(|&(start, end, _)| (start, std::cmp::Reverse(end)));
        // The furthest end of the spans so far.
        let mut reach = 0;
        for (_, end, replied) in spans {
            if end > reach {
                found.extend_from_slice(&replied.calls);
                reach = end;
            }
        }
    }
}

/// The strings of `value` at least [`MIN_BYTES`] long, in document order.
fn collect_strings<'a>(value: &'a Value, into: &mut Vec<&'a str>) {
    match value {
        Value::String(text) if text.len() >= MIN_BYTES => into.push(text),
        Value::Array(items) => items.iter().for_each(|item| collect_strings(item, into)),
        Value::Object(map) => map.values().for_each(|item| collect_strings(item, into)),
        _ => {}
    }
}

/// The first [`MIN_BYTES`] bytes of `bytes` as one number.
fn window(bytes: &[u8]) -> u128 {
    let mut first = [0; MIN_BYTES];
    first.copy_from_slice(&bytes[..MIN_BYTES]);
    u128::from_le_bytes(first)
}

/// The polynomial hash of `bytes`: Σ bᵢ·BASE^(n−1−i) modulo 2⁶⁴.
fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0, |hash: u64, &byte| {
        hash.wrapping_mul(BASE).wrapping_add(u64::from(byte))
    })
}

/// The hashes of a text's prefixes and the powers of the base, so that the hash of any slice
/// is two multiplications away.
struct Prefixes {
    hashes: Vec<u64>,
    powers: Vec<u64>,
}

impl Prefixes {
    fn of(text: &[u8]) -> Self {
        let mut hashes = Vec::with_capacity(text.len() + 1);
        let mut powers = Vec::with_capacity(text.len() + 1);
        let (mut hash, mut power) = (0u64, 1u64);
        hashes.push(hash);
        powers.push(power);
        for &byte in text {
            hash = hash.wrapping_mul(BASE).wrapping_add(u64::from(byte));
            power = power.wrapping_mul(BASE);
            hashes.push(hash);
            powers.push(power);
        }
        Self { hashes, powers }
    }

    /// The hash of `text[start..end]`.
    fn hash(&self, start: usize, end: usize) -> u64 {
        self.hashes[end].wrapping_sub(self.hashes[start].wrapping_mul(self.powers[end - start]))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_reply_quoted_in_a_later_prompt_feeds_it() {
        let mut feeds = Feeds::default();
        assert!(
            feeds
                .fed_by(&json!("anything at all, long enough"), None)
                .is_empty()
        );
        feeds.delivered(1, &json!("The draft says: ship on Friday.\nWith tests."));
        feeds.delivered(
            2,
            &json!({"score": 4, "notes": ["needs a clearer intro", "ok"]}),
        );
        feeds.delivered(3, &json!("yes"));
        feeds.delivered(4, &json!("an unrelated reply nobody quotes"));
        let prompt = json!(
            "Review this.\nThe draft says: ship on Friday.\nWith tests.\nNotes: needs a clearer intro. yes"
        );
        assert_eq!(
            feeds.fed_by(&prompt, None),
            [1, 2],
            "3 is too short to tell"
        );
        // In a structured prompt, and in the instruction.
        let structured = json!({"draft": "The draft says: ship on Friday.\nWith tests."});
        assert_eq!(feeds.fed_by(&structured, None), [1]);
        assert_eq!(
            feeds.fed_by(
                &json!("short"),
                Some("keep: an unrelated reply nobody quotes!")
            ),
            [4]
        );
        // A prompt holding only the start of a reply is not fed by it.
        assert!(
            feeds
                .fed_by(&json!("The draft says: ship on Monday."), None)
                .is_empty()
        );
    }

    #[test]
    fn a_reply_inside_another_reply_fed_that_one() {
        let mut feeds = Feeds::default();
        let plan = "an outline in three parts";
        feeds.delivered(1, &json!(plan));
        feeds.delivered(2, &json!(format!("part one, following {plan}")));
        feeds.delivered(3, &json!(format!("part two, following {plan}")));
        feeds.delivered(4, &json!(format!("part two, following {plan}")));
        let joined = json!(format!(
            "join: part one, following {plan} / part two, following {plan}"
        ));
        assert_eq!(feeds.fed_by(&joined, None), [2, 3, 4], "not the plan");
        let quoted_apart = json!(format!("join: part one, following {plan}; recall {plan}"));
        assert_eq!(feeds.fed_by(&quoted_apart, None), [1, 2]);
    }

    #[test]
    fn leaves_that_replied_alike_share_one_text() {
        let mut feeds = Feeds::default();
        for call_id in 0..1000 {
            feeds.delivered(call_id, &json!("No issues found in this section."));
        }
        assert_eq!(feeds.by_start.values().map(Vec::len).sum::<usize>(), 1);
        let joined = json!(vec!["No issues found in this section."; 1000].join(" | "));
        assert_eq!(feeds.fed_by(&joined, None), (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn replies_sharing_their_start_are_told_apart_by_the_whole_text() {
        let mut feeds = Feeds::default();
        for call_id in 0..200 {
            feeds.delivered(
                call_id,
                &json!(format!("Here is the answer: number {call_id}.")),
            );
        }
        let prompt =
            json!("Combine: Here is the answer: number 17. Here is the answer: number 170.");
        assert_eq!(feeds.fed_by(&prompt, None), [17, 170]);
        // Text at the very end of the prompt, and a prompt of exactly one window.
        feeds.delivered(500, &json!("exactly16bytes!!"));
        assert_eq!(feeds.fed_by(&json!("exactly16bytes!!"), None), [500]);
        assert!(feeds.fed_by(&json!("exactly16bytes!"), None).is_empty());
    }

    #[test]
    fn text_past_ascii_is_matched_byte_for_byte() {
        let mut feeds = Feeds::default();
        feeds.delivered(7, &json!("résumé — naïve café, 東京 🚀"));
        assert_eq!(
            feeds.fed_by(&json!("quoted: résumé — naïve café, 東京 🚀 end"), None),
            [7]
        );
        assert!(
            feeds
                .fed_by(&json!("résumé — naive café, 東京 🚀"), None)
                .is_empty()
        );
    }
}
