//! The expected cost beside the ceiling: the output tokens a leaf will likely write, learnt
//! from the replies the journal recorded of leaves like it ([`History`]), else
//! [`DEFAULT_EXPECTED_OUTPUT_TOKENS`]; never more than the leaf's ceiling.
//!
//! Leaves are alike by, in this order, the first that the journal has replies of:
//! 1. the same profile, schema shape, `agent_type` and label prefix;
//! 2. the same profile and schema shape;
//! 3. the same `agent_type`;
//! 4. the same label prefix.
//!
//! A schema's shape is its structure without annotations (`title`, `description`, `examples`,
//! `default`, `$comment`), keys in order, hashed; no schema (a text reply) is a shape of its
//! own. A label's prefix is its leading letters, `-` and `_` (`review` of `review parser.rs`,
//! `reviewer` of `reviewer-2`). What is expected of a kind is the median of its replies'
//! output tokens: a few runaway replies (a leaf looping through tools) do not move it.

use std::collections::HashMap;

use flowbox_backends::{LeafBackend, LeafRequest};
use flowbox_store::{CheckpointStore, ReplySample, StoreError, sha256_hex};
use serde_json::{Map, Value};

/// The output tokens expected of a leaf the journal has seen nothing like (or with no
/// journal): about 225 English words, a few paragraphs — what a leaf answering one focused
/// question writes, and within the 150–400 tokens typical of such replies. A leaf whose
/// ceiling is lower (a short schema, a low output limit) is expected at its ceiling.
pub const DEFAULT_EXPECTED_OUTPUT_TOKENS: u64 = 300;

/// How many of the journal's newest leaf replies a plan learns from: enough for a median per
/// kind of leaf, few enough to read in milliseconds.
pub const REPLY_SAMPLE: usize = 1000;

/// Schema keywords that describe rather than constrain: they do not change a reply's shape.
const ANNOTATIONS: &[&str] = &["title", "description", "examples", "default", "$comment"];

/// Schema keywords whose value maps names to schemas: the names are structure, the schemas
/// are walked.
const NAMED_SCHEMAS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// Schema keywords whose value is data, kept as it is.
const DATA: &[&str] = &["enum", "const", "required"];

/// What kind of leaf one is, for finding the replies of leaves like it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct LeafKind {
    /// The profile it runs on (`None`: the backend's default model).
    profile: Option<String>,
    /// Its schema's shape (`None`: a text reply).
    shape: Option<String>,
    agent_type: Option<String>,
    /// Its label's prefix.
    label: Option<String>,
}

impl LeafKind {
    pub(crate) fn new(
        profile: Option<String>,
        schema: Option<&Value>,
        agent_type: Option<String>,
        label: Option<&str>,
    ) -> Self {
        Self {
            profile,
            shape: schema.map(shape),
            agent_type,
            label: label.and_then(label_prefix),
        }
    }

    /// The likenesses to look its replies up by, most alike first.
    fn likenesses(&self) -> impl Iterator<Item = Likeness> {
        [
            Some(Likeness::Same(self.clone())),
            Some(Likeness::Shape(self.profile.clone(), self.shape.clone())),
            self.agent_type.clone().map(Likeness::AgentType),
            self.label.clone().map(Likeness::Label),
        ]
        .into_iter()
        .flatten()
    }
}

/// One way leaves are alike (see the module's list).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Likeness {
    Same(LeafKind),
    Shape(Option<String>, Option<String>),
    AgentType(String),
    Label(String),
}

/// A leaf's expected output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expected {
    pub output_tokens: u64,
    /// Whether the journal's replies gave it (else it is the default).
    pub from_history: bool,
}

/// The median output tokens of the journal's recent replies, per likeness.
#[derive(Debug, Default)]
pub(crate) struct History {
    medians: HashMap<Likeness, u64>,
}

impl History {
    /// What `store`'s newest [`REPLY_SAMPLE`] replies say, their profiles as `backend` resolves
    /// them today (a template's model included); nothing without a store.
    pub(crate) async fn read(
        store: Option<&dyn CheckpointStore>,
        backend: &dyn LeafBackend,
    ) -> Result<Self, StoreError> {
        let Some(store) = store else {
            return Ok(Self::default());
        };
        let samples = store.recent_replies(REPLY_SAMPLE).await?;
        Ok(Self::learn(&samples, |model, agent_type| {
            let mut request = LeafRequest::new(0, Value::String(String::new()));
            request.model = model;
            request.agent_type = agent_type;
            backend.estimate(&request).profile
        }))
    }

    /// The medians of `samples`, each sample's profile given by `profile_of(model,
    /// agent_type)` (asked once per pair).
    fn learn(
        samples: &[ReplySample],
        mut profile_of: impl FnMut(Option<String>, Option<String>) -> Option<String>,
    ) -> Self {
        let mut profiles = HashMap::new();
        let mut shapes: HashMap<String, String> = HashMap::new();
        let mut tokens: HashMap<Likeness, Vec<u64>> = HashMap::new();
        for sample in samples {
            let pair = (sample.model.clone(), sample.agent_type.clone());
            let profile = profiles
                .entry(pair)
                .or_insert_with_key(|(model, agent_type)| {
                    profile_of(model.clone(), agent_type.clone())
                })
                .clone();
            // Recent replies repeat a few schemas: each is shaped once.
            let shape = sample.schema.as_ref().map(|schema| {
                shapes
                    .entry(schema.to_string())
                    .or_insert_with(|| shape(schema))
                    .clone()
            });
            let kind = LeafKind {
                profile,
                shape,
                agent_type: sample.agent_type.clone(),
                label: sample.label.as_deref().and_then(label_prefix),
            };
            for likeness in kind.likenesses() {
                tokens
                    .entry(likeness)
                    .or_default()
                    .push(sample.output_tokens);
            }
        }
        let medians = tokens
            .into_iter()
            .map(|(likeness, mut counts)| {
                counts.sort_unstable();
                (likeness, median(&counts))
            })
            .collect();
        Self { medians }
    }

    /// The output tokens expected of a leaf of `kind` whose ceiling is `ceiling`.
    pub(crate) fn expect(&self, kind: &LeafKind, ceiling: u64) -> Expected {
        match kind
            .likenesses()
            .find_map(|likeness| self.medians.get(&likeness))
        {
            Some(&tokens) => Expected {
                output_tokens: tokens.min(ceiling),
                from_history: true,
            },
            None => Expected {
                output_tokens: DEFAULT_EXPECTED_OUTPUT_TOKENS.min(ceiling),
                from_history: false,
            },
        }
    }
}

/// The median of sorted, non-empty `counts` (of an even number, the two middle ones' mean,
/// rounded up).
fn median(counts: &[u64]) -> u64 {
    let n = counts.len();
    let (low, high) = (counts[(n - 1) / 2], counts[n / 2]);
    low + (high - low).div_ceil(2)
}

/// A schema's shape: the SHA-256 of its structure (see [`structure`]).
fn shape(schema: &Value) -> String {
    sha256_hex(structure(schema).to_string().as_bytes())
}

/// A schema without its annotations, object keys in order: two schemas that differ only in
/// their descriptions or key order have one structure.
fn structure(schema: &Value) -> Value {
    match schema {
        Value::Object(keywords) => sorted(keywords, |keyword, value| {
            if ANNOTATIONS.contains(&keyword) {
                None
            } else if NAMED_SCHEMAS.contains(&keyword) {
                Some(match value {
                    Value::Object(named) => sorted(named, |_, schema| Some(structure(schema))),
                    other => structure(other),
                })
            } else if DATA.contains(&keyword) {
                Some(value.clone())
            } else {
                Some(structure(value))
            }
        }),
        Value::Array(items) => Value::Array(items.iter().map(structure).collect()),
        other => other.clone(),
    }
}

/// `map`'s entries in key order, each value as `keep` makes it (`None` leaves it out).
fn sorted(map: &Map<String, Value>, keep: impl Fn(&str, &Value) -> Option<Value>) -> Value {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    Value::Object(
        keys.into_iter()
            .filter_map(|key| keep(key, &map[key]).map(|value| (key.clone(), value)))
            .collect(),
    )
}

/// A label's leading letters, `-` and `_`, without a trailing `-` or `_`; `None` when that
/// leaves nothing.
fn label_prefix(label: &str) -> Option<String> {
    let prefix: String = label
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphabetic() || matches!(c, '-' | '_'))
        .collect();
    let prefix = prefix.trim_end_matches(['-', '_']);
    (!prefix.is_empty()).then(|| prefix.to_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn sample(label: &str, schema: Option<Value>, output_tokens: u64) -> ReplySample {
        ReplySample {
            model: None,
            agent_type: None,
            label: Some(label.into()),
            schema,
            output_tokens,
        }
    }

    fn kind(schema: Option<&Value>, agent_type: Option<&str>, label: &str) -> LeafKind {
        LeafKind::new(None, schema, agent_type.map(str::to_owned), Some(label))
    }

    #[test]
    fn schemas_that_differ_only_in_annotations_and_key_order_have_one_shape() {
        let verdict = json!({
            "type": "object",
            "properties": {
                "verdict": {"enum": ["approve", "revise"], "description": "the call"},
                "description": {"type": "string", "title": "why"}
            },
            "required": ["verdict", "description"]
        });
        let reordered = json!({
            "required": ["verdict", "description"],
            "title": "Verdict",
            "properties": {
                "description": {"type": "string"},
                "verdict": {"enum": ["approve", "revise"]}
            },
            "type": "object"
        });
        assert_eq!(shape(&verdict), shape(&reordered));
        // A property named like an annotation is structure, and so is every constraint.
        let without = json!({"type": "object", "properties": {"verdict": {"enum": ["approve", "revise"]}}, "required": ["verdict", "description"]});
        assert_ne!(shape(&verdict), shape(&without));
        let longer = json!({"enum": ["approve", "revise", "reject"]});
        assert_ne!(
            shape(&json!({"enum": ["approve", "revise"]})),
            shape(&longer)
        );
    }

    #[test]
    fn labels_are_alike_by_their_leading_letters() {
        for (label, prefix) in [
            ("review parser.rs", Some("review")),
            ("reviewer-2", Some("reviewer")),
            ("step 1 try 2", Some("step")),
            ("code_review: a", Some("code_review")),
            ("  synthesis", Some("synthesis")),
            ("3rd pass", None),
            ("", None),
        ] {
            assert_eq!(label_prefix(label).as_deref(), prefix, "{label}");
        }
    }

    #[test]
    fn medians_are_robust_to_a_runaway_reply() {
        assert_eq!(median(&[100]), 100);
        assert_eq!(median(&[100, 201]), 151);
        assert_eq!(median(&[100, 200, 300, 4000]), 250);
        assert_eq!(median(&[90, 100, 110, 4000, 4000]), 110);
    }

    #[test]
    fn the_most_alike_replies_give_the_expected_output_else_the_default() {
        let check = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}});
        let samples = [
            sample("review a.rs", None, 200),
            sample("review b.rs", None, 400),
            sample("summary", None, 900),
            sample("check 1", Some(check.clone()), 40),
            ReplySample {
                agent_type: Some("critic".into()),
                ..sample("critique", None, 700)
            },
        ];
        let mut asked = Vec::new();
        let history = History::learn(&samples, |model, agent_type| {
            asked.push((model.clone(), agent_type.clone()));
            model
        });
        // The profile of each (model, agent type) pair is asked once.
        assert_eq!(asked, [(None, None), (None, Some("critic".into()))]);
        let expect = |kind: &LeafKind, ceiling| history.expect(kind, ceiling);
        let from = |output_tokens, from_history| Expected {
            output_tokens,
            from_history,
        };
        // The same kind: the reviews' median.
        assert_eq!(
            expect(&kind(None, None, "review c.rs"), 4096),
            from(300, true)
        );
        // A text leaf of a new label: every text reply on the profile (200, 400, 700, 900).
        assert_eq!(expect(&kind(None, None, "draft"), 4096), from(550, true));
        // The same schema, however described.
        let described = json!({"properties": {"ok": {"type": "boolean", "description": "done?"}}, "type": "object"});
        assert_eq!(
            expect(&kind(Some(&described), None, "verify"), 4096),
            from(40, true)
        );
        // A new schema: its agent type's replies, else its label's.
        let other = json!({"type": "array"});
        let critic = kind(Some(&other), Some("critic"), "look");
        assert_eq!(expect(&critic, 4096), from(700, true));
        assert_eq!(
            expect(&kind(Some(&other), None, "summary 2"), 4096),
            from(900, true)
        );
        // Nothing alike: the default; and never above the ceiling.
        assert_eq!(
            expect(&kind(Some(&other), None, "new"), 4096),
            from(300, false)
        );
        assert_eq!(expect(&kind(Some(&other), None, "new"), 9), from(9, false));
        assert_eq!(expect(&critic, 500), from(500, true));
        // Another profile's text replies are not this one's.
        let fast = LeafKind::new(Some("fast".into()), None, None, Some("draft"));
        assert_eq!(expect(&fast, 4096), from(300, false));
        // No journal: defaults only.
        let none = History::default();
        assert_eq!(
            none.expect(&kind(None, None, "review c.rs"), 4096),
            from(300, false)
        );
    }
}
