//! The price table: provider model id → dollars per million input, output and cached input
//! tokens, with the date it was written. It is a file the operator keeps; nothing is fetched.
//!
//! Prices are read from the JSON text exactly (no float on the way) and kept as whole
//! micro-dollars per million tokens, which is pico-dollars per token: costs add up without
//! rounding, so a dollar budget refuses at exactly the leaf that would cross it.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use flowbox_backends::Usage;

/// The most a price may be, in dollars per million tokens: far above any model's, yet small
/// enough that a run's costs cannot overflow.
const MAX_PRICE_USD_PER_MILLION: u64 = 1_000_000;

/// Decimal places a price keeps (a millionth of a dollar per million tokens).
const PRICE_DECIMALS: u32 = 6;

/// The price of one model, per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price {
    /// Input, in micro-dollars per million tokens (= pico-dollars per token).
    input: u64,
    output: u64,
    cached_input: Option<u64>,
}

impl Price {
    /// Dollars per million input tokens.
    pub fn input_usd_per_million(&self) -> f64 {
        usd_from_micros(self.input)
    }

    /// Dollars per million output tokens.
    pub fn output_usd_per_million(&self) -> f64 {
        usd_from_micros(self.output)
    }

    /// Dollars per million cached input tokens, when the table gives them. Usage as flowbox
    /// counts it does not separate cached tokens, so costs price every input token at the
    /// full input price: an estimate from above.
    pub fn cached_input_usd_per_million(&self) -> Option<f64> {
        self.cached_input.map(usd_from_micros)
    }

    /// What `usage` costs, in pico-dollars.
    pub(crate) fn cost(&self, usage: Usage) -> u128 {
        u128::from(usage.input_tokens) * u128::from(self.input)
            + u128::from(usage.output_tokens) * u128::from(self.output)
    }

    /// The larger of its input and output prices: how plans rank models by cost.
    pub(crate) fn rank(&self) -> (u64, u64) {
        (self.output, self.input)
    }
}

fn usd_from_micros(micros: u64) -> f64 {
    micros as f64 / 1e6
}

/// Pico-dollars as dollars, for reports.
pub(crate) fn usd(picos: u128) -> f64 {
    picos as f64 / 1e12
}

/// Dollars as pico-dollars (a budget or gate given as a float), rounded down.
pub(crate) fn picos(usd: f64) -> u128 {
    (usd * 1e12) as u128
}

/// Model id → price, with the date the prices were written down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriceTable {
    written: String,
    models: BTreeMap<String, Price>,
    /// Where it was read from, for messages.
    source: String,
}

/// Why a price table could not be read or has no price for a model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PriceError {
    /// The file could not be read.
    #[error("cannot read the price table {path}: {reason}")]
    Unreadable {
        /// The file.
        path: String,
        /// The operating system's reason.
        reason: String,
    },
    /// The text is not a price table: bad JSON, a missing or unknown field, a price that is
    /// negative, not a number, too precise or too large, a date that is not `YYYY-MM-DD`.
    #[error("the price table {table} is invalid: {reason}")]
    Invalid {
        /// Where it came from (a file, or `text`).
        table: String,
        /// What is wrong, naming the field.
        reason: String,
    },
    /// A model the run would use has no price in the table.
    #[error(
        "the price table {table} (written {written}) has no price for model {model:?}; it \
         prices {}; add the model to it",
        known.join(", ")
    )]
    UnknownModel {
        /// The provider model id.
        model: String,
        /// Where the table came from.
        table: String,
        /// Its date.
        written: String,
        /// The models it prices.
        known: Vec<String>,
    },
}

impl PriceTable {
    /// Reads a price table from a JSON file: `{"written": "YYYY-MM-DD", "models": {MODEL:
    /// {"input": USD, "output": USD, "cached_input"?: USD}}}`, prices in dollars per million
    /// tokens (at most six decimals, not negative, at most 1 000 000), and an optional `note`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, PriceError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| PriceError::Unreadable {
            path: path.display().to_string(),
            reason: error.to_string(),
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Reads a price table from JSON text (the format of [`PriceTable::load`]).
    pub fn from_json(text: &str) -> Result<Self, PriceError> {
        Self::parse(text, "text")
    }

    fn parse(text: &str, source: &str) -> Result<Self, PriceError> {
        let invalid = |reason: String| PriceError::Invalid {
            table: source.to_owned(),
            reason,
        };
        let value: Value =
            serde_json::from_str(text).map_err(|e| invalid(format!("not JSON: {e}")))?;
        let Value::Object(fields) = value else {
            return Err(invalid(
                "it must be a JSON object with `written` and `models`".into(),
            ));
        };
        let mut written = None;
        let mut models = None;
        for (key, value) in fields {
            match key.as_str() {
                "written" => written = Some(value),
                "models" => models = Some(value),
                "note" => {}
                other => {
                    return Err(invalid(format!(
                        "unknown field {other:?} (expected written, models, note)"
                    )));
                }
            }
        }
        let written = match written {
            Some(Value::String(date)) if is_date(&date) => date,
            Some(other) => {
                return Err(invalid(format!(
                    "written must be the date the prices were written, as \"YYYY-MM-DD\", not {other}"
                )));
            }
            None => {
                return Err(invalid(
                    "written (the date, \"YYYY-MM-DD\") is missing".into(),
                ));
            }
        };
        let models = match models {
            Some(Value::Object(models)) if !models.is_empty() => models,
            Some(_) => {
                return Err(invalid(
                    "models must be an object of model id → prices, with at least one model".into(),
                ));
            }
            None => return Err(invalid("models is missing".into())),
        };
        let mut table = BTreeMap::new();
        for (model, prices) in models {
            let price =
                parse_price(&prices).map_err(|reason| invalid(format!("{model}: {reason}")))?;
            table.insert(model, price);
        }
        Ok(Self {
            written,
            models: table,
            source: source.to_owned(),
        })
    }

    /// The date the prices were written (`YYYY-MM-DD`).
    pub fn written(&self) -> &str {
        &self.written
    }

    /// The models it prices.
    pub fn models(&self) -> impl Iterator<Item = &str> {
        self.models.keys().map(String::as_str)
    }

    /// The price of `model`, or an error naming the table and what it does price.
    pub fn price(&self, model: &str) -> Result<Price, PriceError> {
        self.models
            .get(model)
            .copied()
            .ok_or_else(|| PriceError::UnknownModel {
                model: model.to_owned(),
                table: self.source.clone(),
                written: self.written.clone(),
                known: self.models.keys().cloned().collect(),
            })
    }

    /// The most expensive model of the table, by output then input price.
    pub(crate) fn most_expensive(&self) -> Option<&str> {
        self.models
            .iter()
            .max_by_key(|(_, price)| price.rank())
            .map(|(model, _)| model.as_str())
    }
}

fn parse_price(value: &Value) -> Result<Price, String> {
    let Value::Object(fields) = value else {
        return Err(format!(
            "expected {{\"input\": USD, \"output\": USD}} per million tokens, not {value}"
        ));
    };
    let (mut input, mut output, mut cached_input) = (None, None, None);
    for (key, value) in fields {
        let slot = match key.as_str() {
            "input" => &mut input,
            "output" => &mut output,
            "cached_input" => &mut cached_input,
            other => {
                return Err(format!(
                    "unknown field {other:?} (expected input, output, cached_input)"
                ));
            }
        };
        *slot = Some(micros(value).map_err(|reason| format!("{key} {reason}"))?);
    }
    Ok(Price {
        input: input.ok_or("input (dollars per million input tokens) is missing")?,
        output: output.ok_or("output (dollars per million output tokens) is missing")?,
        cached_input,
    })
}

/// A JSON number of dollars as whole micro-dollars, from its exact text.
fn micros(value: &Value) -> Result<u64, String> {
    let Value::Number(number) = value else {
        return Err(format!("must be a number of dollars, not {value}"));
    };
    let text = number.to_string();
    if text.starts_with('-') {
        return Err(format!("must not be negative; it is {text}"));
    }
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (
            mantissa,
            exponent
                .parse::<i64>()
                .map_err(|_| format!("is not a usable number: {text}"))?,
        ),
        None => (text.as_str(), 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{whole}{fraction}");
    let significant = digits.trim_start_matches('0');
    if significant.is_empty() {
        return Ok(0);
    }
    let trimmed = significant.trim_end_matches('0');
    // The value is `trimmed` × 10^scale micro-dollars.
    let scale = exponent
        .saturating_sub(fraction.len() as i64)
        .saturating_add((significant.len() - trimmed.len()) as i64)
        .saturating_add(i64::from(PRICE_DECIMALS));
    if scale < 0 {
        return Err(format!(
            "has more than {PRICE_DECIMALS} decimal places (prices are kept to a millionth of a \
             dollar per million tokens); it is {text}"
        ));
    }
    let too_large = || format!("must be at most {MAX_PRICE_USD_PER_MILLION}; it is {text}");
    let value = u32::try_from(scale)
        .ok()
        .and_then(|scale| 10u64.checked_pow(scale))
        .zip(trimmed.parse::<u64>().ok())
        .and_then(|(power, digits)| digits.checked_mul(power))
        .ok_or_else(too_large)?;
    if value > MAX_PRICE_USD_PER_MILLION * 10u64.pow(PRICE_DECIMALS) {
        return Err(too_large());
    }
    Ok(value)
}

/// `YYYY-MM-DD` with a month from 1 to 12 and a day from 1 to 31.
fn is_date(text: &str) -> bool {
    let bytes = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        bytes[range.clone()].iter().all(u8::is_ascii_digit) && text[range].parse::<u32>().is_ok()
    };
    if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
        return false;
    }
    if !(digits(0..4) && digits(5..7) && digits(8..10)) {
        return false;
    }
    let month: u32 = text[5..7].parse().unwrap_or(0);
    let day: u32 = text[8..10].parse().unwrap_or(0);
    (1..=12).contains(&month) && (1..=31).contains(&day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(models: &str) -> Result<PriceTable, PriceError> {
        PriceTable::from_json(&format!(
            r#"{{"written": "2025-11-30", "models": {models}}}"#
        ))
    }

    #[test]
    fn prices_are_read_exactly_from_their_text() {
        let table = table(
            r#"{"a": {"input": 2.50, "output": 10, "cached_input": 1.25},
                "b": {"input": 0.075, "output": 3e-1}, "c": {"input": 0, "output": 1e2}}"#,
        )
        .unwrap();
        assert_eq!(table.written(), "2025-11-30");
        let a = table.price("a").unwrap();
        assert_eq!(
            (a.input, a.output, a.cached_input),
            (2_500_000, 10_000_000, Some(1_250_000))
        );
        let b = table.price("b").unwrap();
        assert_eq!((b.input, b.output), (75_000, 300_000));
        assert_eq!(table.price("c").unwrap().output, 100_000_000);
        // A million input tokens and a thousand output tokens of `a`: $2.50 + $0.01.
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 1000,
            estimated_tokens: 0,
        };
        assert_eq!(usd(a.cost(usage)), 2.51);
        assert_eq!(table.most_expensive(), Some("c"));
    }

    #[test]
    fn bad_input_is_a_clear_error_naming_the_field() {
        let cases = [
            ("not json", "not JSON"),
            (
                r#"{"a": {"input": -1, "output": 1}}"#,
                "a: input must not be negative; it is -1",
            ),
            (
                r#"{"a": {"input": "2.5", "output": 1}}"#,
                "a: input must be a number of dollars",
            ),
            (
                r#"{"a": {"input": 1}}"#,
                "a: output (dollars per million output tokens) is missing",
            ),
            (
                r#"{"a": {"input": 1, "output": 1, "batch": 1}}"#,
                "a: unknown field \"batch\"",
            ),
            (
                r#"{"a": {"input": 0.0000001, "output": 1}}"#,
                "more than 6 decimal places",
            ),
            (
                r#"{"a": {"input": 2e6, "output": 1}}"#,
                "must be at most 1000000",
            ),
            (
                r#"{"a": {"input": 1e400, "output": 1}}"#,
                "must be at most 1000000",
            ),
            ("{}", "at least one model"),
        ];
        for (models, expected) in cases {
            let text = if models == "not json" {
                "not json".to_owned()
            } else {
                format!(r#"{{"written": "2025-11-30", "models": {models}}}"#)
            };
            let error = PriceTable::from_json(&text).unwrap_err().to_string();
            assert!(error.contains(expected), "{models}: {error}");
            assert!(
                error.starts_with("the price table text is invalid: "),
                "{error}"
            );
        }
        for (text, expected) in [
            (r#"{"models": {"a": {"input": 1, "output": 1}}}"#, "written"),
            (r#"{"written": "30/11/2025", "models": {}}"#, "YYYY-MM-DD"),
            (
                r#"{"written": "2025-11-30", "models": {}, "currency": "EUR"}"#,
                "unknown field \"currency\"",
            ),
        ] {
            let error = PriceTable::from_json(text).unwrap_err().to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn an_unknown_model_names_the_table_and_what_it_prices() {
        let table = table(r#"{"gpt-4o": {"input": 2.5, "output": 10}}"#).unwrap();
        let error = table.price("claude-opus-4").unwrap_err();
        assert_eq!(
            error.to_string(),
            "the price table text (written 2025-11-30) has no price for model \"claude-opus-4\"; \
             it prices gpt-4o; add the model to it"
        );
    }

    #[test]
    fn a_missing_file_says_which() {
        let error = PriceTable::load("/nonexistent/prices.json").unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("cannot read the price table /nonexistent/prices.json: "),
            "{error}"
        );
    }
}
