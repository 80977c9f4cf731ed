//! What a leaf will run on and may cost, known before it starts: the [`LeafEstimate`] a
//! backend gives for a request ([`crate::LeafBackend::estimate`]), which the runtime's plans and
//! dollar budgets price, and the [`Tokenizer`] its input is counted with.
//!
//! Input tokens are counted with the model family's own tokenizer where it is public (OpenAI's
//! `o200k_base` and `cl100k_base`, embedded, nothing fetched) and approximated otherwise (one
//! token per [`APPROXIMATE_BYTES_PER_TOKEN`] bytes, on the high side for prose). Output tokens
//! are a ceiling: the leaf's output limit, or less when its schema bounds the reply.

use serde::Serialize;
use serde_json::Value;

use crate::LeafRequest;

/// The bytes of text the approximation counts as one token. English prose averages about four
/// bytes per token on current tokenizers and code or JSON about three, so three errs towards
/// estimating more than is spent.
pub const APPROXIMATE_BYTES_PER_TOKEN: u64 = 3;

/// The output ceiling of a leaf whose backend states none: the leaf agents' default limit of
/// one turn (`AgentConfig::max_tokens`).
pub const DEFAULT_OUTPUT_LIMIT: u64 = 4096;

/// How input tokens are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Tokenizer {
    /// OpenAI's `o200k_base` (GPT-4o, GPT-4.1, GPT-5, the o-series, gpt-oss).
    O200kBase,
    /// OpenAI's `cl100k_base` (GPT-4, GPT-3.5).
    Cl100kBase,
    /// No public tokenizer for the model: one token per [`APPROXIMATE_BYTES_PER_TOKEN`] bytes.
    Approximate,
}

impl Tokenizer {
    /// The tokenizer of a provider model id: OpenAI's public vocabularies for the model
    /// families that use them (the same prefixes as OpenAI's `tiktoken`), the approximation
    /// for every other model.
    pub fn for_model(model: &str) -> Self {
        use tiktoken_rs::tokenizer::{Tokenizer as Known, get_tokenizer};
        match get_tokenizer(model) {
            Some(Known::O200kBase | Known::O200kHarmony) => Self::O200kBase,
            Some(Known::Cl100kBase) => Self::Cl100kBase,
            _ => Self::Approximate,
        }
    }

    /// The tokens of `text`.
    pub fn count(self, text: &str) -> u64 {
        if text.is_empty() {
            return 0;
        }
        let bpe = match self {
            Self::O200kBase => tiktoken_rs::o200k_base_singleton(),
            Self::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
            Self::Approximate => return approximate(text.len()),
        };
        bpe.encode_ordinary(text).len() as u64
    }

    /// Its name, as plans show it: `o200k_base`, `cl100k_base` or `approximate`.
    pub fn name(self) -> &'static str {
        match self {
            Self::O200kBase => "o200k_base",
            Self::Cl100kBase => "cl100k_base",
            Self::Approximate => "approximate",
        }
    }
}

/// What one leaf will run on and may cost, before it starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct LeafEstimate {
    /// The model profile the leaf runs on: the script's `model=`, else its template's model;
    /// `None` for the backend's default model.
    pub profile: Option<String>,
    /// The provider model id, which prices it.
    pub model: String,
    /// The input of its first turn, in tokens: system prompt, prompt, tool definitions and
    /// schema. Earlier turns of its `instance_id` and the results of tools it calls come on
    /// top.
    pub input_tokens: u64,
    /// How `input_tokens` was counted.
    pub tokenizer: Tokenizer,
    /// The most tokens its answer may take: its output limit, or the longest reply its schema
    /// allows when that is less. Tool-use turns and a schema repair turn may add more.
    pub max_output_tokens: u64,
    /// Whether the schema, rather than the output limit, set `max_output_tokens`.
    pub output_bounded_by_schema: bool,
    /// The host tools it may use.
    pub tools: Vec<String>,
}

impl LeafEstimate {
    /// The estimate of a backend that knows nothing of models and prompts (an offline one, or
    /// a custom one that does not say): the profile the script named (also as the model id, or
    /// `default`), the prompt, instruction and schema approximated, [`DEFAULT_OUTPUT_LIMIT`]
    /// bounded by the schema, and the tools the call named.
    pub fn generic(request: &LeafRequest) -> Self {
        let tokenizer = Tokenizer::Approximate;
        // The approximation needs only lengths: no text is copied for it.
        let prompt = match &request.prompt {
            Value::String(text) => text.len(),
            other => other.to_string().len(),
        };
        let instruction = request.instruction.as_ref().map_or(0, String::len);
        let schema = request.schema.as_ref().map_or(0, |s| s.to_string().len());
        let (max_output_tokens, output_bounded_by_schema) =
            output_ceiling(DEFAULT_OUTPUT_LIMIT, request.schema.as_ref());
        Self {
            profile: request.model.clone(),
            model: request.model.clone().unwrap_or_else(|| "default".into()),
            input_tokens: [prompt, instruction, schema]
                .into_iter()
                .map(approximate)
                .sum(),
            tokenizer,
            max_output_tokens,
            output_bounded_by_schema,
            tools: request.tools.clone().unwrap_or_default(),
        }
    }

    /// An estimate from its parts, for backends that know their model and prompts.
    pub fn new(
        profile: Option<String>,
        model: String,
        input: &[&str],
        output_limit: u64,
        schema: Option<&Value>,
        tools: Vec<String>,
    ) -> Self {
        let tokenizer = Tokenizer::for_model(&model);
        let (max_output_tokens, output_bounded_by_schema) = output_ceiling(output_limit, schema);
        Self {
            profile,
            input_tokens: input.iter().map(|text| tokenizer.count(text)).sum(),
            model,
            tokenizer,
            max_output_tokens,
            output_bounded_by_schema,
            tools,
        }
    }
}

/// The approximate tokens of `bytes` bytes of text.
fn approximate(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(APPROXIMATE_BYTES_PER_TOKEN)
}

/// The output ceiling under `limit` and `schema`, and whether the schema set it.
fn output_ceiling(limit: u64, schema: Option<&Value>) -> (u64, bool) {
    match schema.and_then(crate::schema::max_json_bytes) {
        Some(bytes) if bytes < limit => (bytes, true),
        _ => (limit, false),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn openai_families_get_their_public_tokenizer_and_others_the_approximation() {
        assert_eq!(Tokenizer::for_model("gpt-4o-mini"), Tokenizer::O200kBase);
        assert_eq!(Tokenizer::for_model("gpt-5"), Tokenizer::O200kBase);
        assert_eq!(Tokenizer::for_model("gpt-4-0613"), Tokenizer::Cl100kBase);
        assert_eq!(
            Tokenizer::for_model("claude-sonnet-4-5"),
            Tokenizer::Approximate
        );
        assert_eq!(
            Tokenizer::for_model("qwen2.5-7b-instruct"),
            Tokenizer::Approximate
        );
    }

    #[test]
    fn counts_are_real_tokens_or_the_documented_approximation() {
        // "hello world" is two tokens in both of OpenAI's vocabularies.
        assert_eq!(Tokenizer::O200kBase.count("hello world"), 2);
        assert_eq!(Tokenizer::Cl100kBase.count("hello world"), 2);
        assert_eq!(Tokenizer::Approximate.count("hello world"), 4);
        assert_eq!(Tokenizer::Approximate.count(""), 0);
    }

    #[test]
    fn a_bounding_schema_lowers_the_output_ceiling() {
        let mut request = LeafRequest::new(1, json!("Decide"));
        let text = LeafEstimate::generic(&request);
        assert_eq!(text.max_output_tokens, DEFAULT_OUTPUT_LIMIT);
        assert!(!text.output_bounded_by_schema);
        request.schema = Some(json!({"enum": ["approve", "revise"]}));
        let decision = LeafEstimate::generic(&request);
        assert_eq!(decision.max_output_tokens, 9);
        assert!(decision.output_bounded_by_schema);
        assert!(decision.input_tokens > text.input_tokens);
    }
}
