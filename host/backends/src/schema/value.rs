//! Builds a JSON value that satisfies a JSON Schema, for offline backends.
//!
//! Covers what structured-output schemas use in practice: `type` (one or a list), objects with
//! `properties`/`required`/`minProperties`, arrays with `items`/`minItems`/`maxItems`, `enum`,
//! `const`, number bounds (inclusive and exclusive, `multipleOf`), string lengths and a few
//! `format`s, local `$ref`s into `$defs`/`definitions`, and `anyOf`/`oneOf`/`allOf`. Values are
//! derived from a seed so the same request always gets the same reply.
//!
//! Schemas come from untrusted scripts and the value is built synchronously on a runtime
//! worker, so building is bounded: counts and lengths are checked against a budget before
//! anything is allocated, all arithmetic is checked or saturating, and the result is validated
//! against the schema once `cost` has found that affordable. A schema the builder cannot
//! satisfy within the budget, or satisfies wrongly (a `pattern`, an exotic `format`), is an
//! error, never a wrong value.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use super::cost::{self, weight};
use super::validate::schema_errors;
use crate::preview;

/// Recursion bound for self-referential schemas: past it, optional parts are left out.
const MAX_DEPTH: usize = 24;

/// The most JSON values (scalars, arrays and objects, nested ones included) one reply may
/// hold: far more than a structured reply needs, little enough to build in milliseconds.
const MAX_NODES: usize = 10_000;

/// The most bytes of text (strings and object keys) one reply may hold.
const MAX_STRING_BYTES: usize = 256 << 10;

/// The most units of work (schemas visited, properties looked at, schema nodes copied by
/// `allOf`, items compared for `uniqueItems`) one reply may take, for schemas that cost time
/// without producing values.
const MAX_STEPS: usize = 1_000_000;

/// The schema `true`, which accepts every value.
static ANYTHING: Value = Value::Bool(true);

/// A value valid against `schema`, varied by `seed`; otherwise why there is none.
///
/// A realistic value comes first (optional properties filled, a couple of items per array).
/// When the schema makes that too large, too costly to check, or wrong (an optional property
/// the builder gets wrong), the leanest value the schema allows is tried instead.
pub(crate) fn value_for(schema: &Value, seed: u64) -> Result<Value, String> {
    attempt(schema, seed, Fill::Realistic).or_else(|_| attempt(schema, seed, Fill::Lean))
}

/// How much optional content a value gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fill {
    /// Optional properties and a second array item, while the budget has room.
    Realistic,
    /// Only what the schema requires.
    Lean,
}

fn attempt(schema: &Value, seed: u64, fill: Fill) -> Result<Value, String> {
    let mut builder = Builder {
        root: schema,
        fill,
        nodes: 0,
        text_bytes: 0,
        steps: 0,
    };
    let value = builder.build(schema, seed, "value", 0)?;
    // The validator has no limits of its own: estimate its work before compiling anything.
    cost::check(schema, &value)?;
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| format!("the schema is not valid: {e}"))?;
    match schema_errors(&validator, &value) {
        None => Ok(value),
        Some(problems) => Err(format!(
            "the value it built, {}, does not match: {}",
            preview(&value.to_string(), 200),
            preview(&problems, 500)
        )),
    }
}

struct Builder<'a> {
    root: &'a Value,
    fill: Fill,
    /// Values built so far (discarded ones included), against [`MAX_NODES`].
    nodes: usize,
    /// Bytes of text built so far, against [`MAX_STRING_BYTES`].
    text_bytes: usize,
    /// Work done so far, against [`MAX_STEPS`].
    steps: usize,
}

impl<'a> Builder<'a> {
    fn build(
        &mut self,
        schema: &Value,
        seed: u64,
        name: &str,
        depth: usize,
    ) -> Result<Value, String> {
        self.work(1)?;
        let Value::Object(schema) = schema else {
            // `true` (or anything else) accepts every value.
            return self.text(format!("{name} {}", seed % 1000));
        };
        if let Some(target) = schema.get("$ref").and_then(Value::as_str)
            && let Some(resolved) = self.resolve(target)
            && depth < MAX_DEPTH
        {
            return self.build(resolved, seed, name, depth + 1);
        }
        if let Some(value) = schema.get("const") {
            return self.copy(value);
        }
        if let Some(Value::Array(options)) = schema.get("enum")
            && !options.is_empty()
        {
            let index = seed % options.len() as u64;
            return self.copy(&options[index as usize]);
        }
        if let Some(Value::Array(all)) = schema.get("allOf") {
            let merged = self.merge_all(schema, all)?;
            return self.build(&Value::Object(merged), seed, name, depth + 1);
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(options)) = schema.get(key)
                && let Some(first) = options.first()
            {
                return self.build(first, seed, name, depth + 1);
            }
        }
        match schema_type(schema) {
            "object" => self.object(schema, seed, depth),
            "array" => self.array(schema, seed, name, depth),
            "integer" => self.scalar(integer(schema, seed)),
            "number" => self.scalar(number(schema, seed)),
            "boolean" => self.scalar(Value::Bool(seed.is_multiple_of(2))),
            "null" => self.scalar(Value::Null),
            _ => self.string(schema, seed, name),
        }
    }

    fn object(
        &mut self,
        schema: &Map<String, Value>,
        seed: u64,
        depth: usize,
    ) -> Result<Value, String> {
        self.charge(1, 0)?;
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let properties = match schema.get("properties") {
            Some(Value::Object(properties)) => Some(properties),
            _ => None,
        };
        self.work(required.len() + properties.map_or(0, Map::len))?;
        let needed: HashSet<&str> = required.iter().copied().collect();
        let min = count(schema, "minProperties", MAX_NODES, "values")?;
        let max = schema
            .get("maxProperties")
            .and_then(Value::as_u64)
            .unwrap_or(u64::MAX);
        let mut out = Map::new();
        for (index, (key, property)) in properties.into_iter().flatten().enumerate() {
            // Optional properties are filled too (a realistic reply has them), while there is
            // room for them and a recursive schema is not deep yet.
            let optional_fits = depth < MAX_DEPTH / 2 && self.roomy() && (out.len() as u64) < max;
            if needed.contains(key.as_str()) || optional_fits {
                let value = self.build(property, mix(seed, index as u64 + 1), key, depth + 1)?;
                self.charge(0, key.len())?;
                out.insert(key.clone(), value);
            }
        }
        for key in required {
            if !out.contains_key(key) {
                let value = self.text(format!("{key} {}", seed % 1000))?;
                self.charge(0, key.len())?;
                out.insert(key.to_owned(), value);
            }
        }
        if schema.get("additionalProperties") != Some(&Value::Bool(false)) {
            let extra = match schema.get("additionalProperties") {
                Some(extra @ Value::Object(_)) => extra,
                _ => &ANYTHING,
            };
            let mut salt = 0u64;
            while out.len() < min {
                salt += 1;
                let key = format!("extra_{salt}");
                if out.contains_key(&key) {
                    continue;
                }
                let value = self.build(extra, mix(seed, salt + 1000), &key, depth + 1)?;
                self.charge(0, key.len())?;
                out.insert(key, value);
            }
        }
        Ok(Value::Object(out))
    }

    fn array(
        &mut self,
        schema: &Map<String, Value>,
        seed: u64,
        name: &str,
        depth: usize,
    ) -> Result<Value, String> {
        self.charge(1, 0)?;
        let min = count(schema, "minItems", MAX_NODES, "values")?;
        let max = schema
            .get("maxItems")
            .and_then(Value::as_u64)
            .map_or(usize::MAX, |max| usize::try_from(max).unwrap_or(usize::MAX));
        let wanted = if depth < MAX_DEPTH && self.roomy() {
            min.max(2)
        } else {
            min
        };
        let count = wanted.min(max);
        let unique = schema.get("uniqueItems").and_then(Value::as_bool) == Some(true);
        let items = schema.get("items").unwrap_or(&ANYTHING);
        let mut out: Vec<Value> = Vec::new();
        // `count` is at most MAX_NODES, so this cannot overflow.
        let attempts = count * 4 + 8;
        let mut attempt = 0;
        while out.len() < count && attempt < attempts {
            let value = self.build(items, mix(seed, attempt as u64 + 101), name, depth + 1)?;
            attempt += 1;
            if unique {
                self.work(out.len())?;
                if out.contains(&value) {
                    continue;
                }
            }
            out.push(value);
        }
        Ok(Value::Array(out))
    }

    fn string(
        &mut self,
        schema: &Map<String, Value>,
        seed: u64,
        name: &str,
    ) -> Result<Value, String> {
        let min = count(schema, "minLength", MAX_STRING_BYTES, "bytes of text")?;
        let text = match schema.get("format").and_then(Value::as_str) {
            Some("date") => format!("2024-01-{:02}", seed % 28 + 1),
            Some("date-time") => format!("2024-01-{:02}T12:00:00Z", seed % 28 + 1),
            Some("time") => format!("12:{:02}:00Z", seed % 60),
            Some("email") => format!("{}@example.com", slug(name)),
            Some("hostname") => format!("{}.example.com", slug(name)),
            Some("ipv4") => format!("192.0.2.{}", seed % 256),
            Some("ipv6") => format!("2001:db8::{:x}", seed & 0xffff),
            Some("uri") | Some("url") => format!("https://example.com/{}", slug(name)),
            Some("uuid") => format!("00000000-0000-4000-8000-{:012x}", seed & 0xffff_ffff_ffff),
            _ => format!("{name} {}", seed % 1000),
        };
        let mut chars: Vec<char> = text.chars().collect();
        if chars.len() < min {
            chars.resize(min, 'x');
        }
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && let Ok(max) = usize::try_from(max)
        {
            chars.truncate(max);
        }
        self.text(chars.into_iter().collect())
    }

    /// A number, boolean or null, charged to the budget.
    fn scalar(&mut self, value: Value) -> Result<Value, String> {
        self.charge(1, 0)?;
        Ok(value)
    }

    /// A string value, charged to the budget.
    fn text(&mut self, text: String) -> Result<Value, String> {
        self.charge(1, text.len())?;
        Ok(Value::String(text))
    }

    /// A copy of a value the schema spells out (`const`, `enum`), charged to the budget before
    /// it is made: a large constant behind a recursive `$ref` must not be copied unboundedly.
    fn copy(&mut self, value: &Value) -> Result<Value, String> {
        let mut pending = vec![value];
        while let Some(value) = pending.pop() {
            match value {
                Value::String(text) => self.charge(1, text.len())?,
                Value::Array(items) => {
                    self.charge(1, 0)?;
                    pending.extend(items);
                }
                Value::Object(map) => {
                    self.charge(1, map.keys().map(String::len).sum())?;
                    pending.extend(map.values());
                }
                _ => self.charge(1, 0)?,
            }
        }
        Ok(value.clone())
    }

    /// `allOf` as one schema: the parts' keywords merged into the base, their `properties` and
    /// `required` combined.
    fn merge_all(
        &mut self,
        base: &Map<String, Value>,
        all: &[Value],
    ) -> Result<Map<String, Value>, String> {
        self.work(weight(base.values(), MAX_STEPS))?;
        let mut merged: Map<String, Value> = base
            .iter()
            .filter(|(key, _)| *key != "allOf")
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        for part in all.iter().filter_map(Value::as_object) {
            self.work(weight(part.values(), MAX_STEPS))?;
            for (key, value) in part {
                match (merged.get_mut(key), value) {
                    (Some(Value::Object(into)), Value::Object(from)) => {
                        into.extend(from.iter().map(|(k, v)| (k.clone(), v.clone())));
                    }
                    (Some(Value::Array(into)), Value::Array(from)) if key == "required" => {
                        into.extend(from.iter().cloned());
                    }
                    _ => {
                        merged.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        Ok(merged)
    }

    /// Follows a local reference such as `#/$defs/step`.
    fn resolve(&self, target: &str) -> Option<&'a Value> {
        let pointer = target.strip_prefix('#')?;
        self.root.pointer(pointer)
    }

    /// Counts `nodes` values and `text_bytes` bytes of text against the budget.
    fn charge(&mut self, nodes: usize, text_bytes: usize) -> Result<(), String> {
        self.nodes = self.nodes.saturating_add(nodes);
        self.text_bytes = self.text_bytes.saturating_add(text_bytes);
        if self.nodes > MAX_NODES {
            return Err(format!(
                "the reply would hold more than {MAX_NODES} JSON values (is the schema \
                 recursive, or very wide?)"
            ));
        }
        if self.text_bytes > MAX_STRING_BYTES {
            return Err(format!(
                "the reply would hold more than {} KiB of text",
                MAX_STRING_BYTES >> 10
            ));
        }
        Ok(())
    }

    /// Counts `steps` units of work against [`MAX_STEPS`].
    fn work(&mut self, steps: usize) -> Result<(), String> {
        self.steps = self.steps.saturating_add(steps);
        if self.steps > MAX_STEPS {
            return Err(format!(
                "the schema takes more than {MAX_STEPS} steps to expand (is it recursive, or \
                 very wide?)"
            ));
        }
        Ok(())
    }

    /// Whether optional content (an optional property, a second array item) still fits,
    /// leaving most of the budget to what the schema requires.
    fn roomy(&self) -> bool {
        self.fill == Fill::Realistic
            && self.nodes < MAX_NODES / 4
            && self.text_bytes < MAX_STRING_BYTES / 4
    }
}

/// A count keyword (`minItems`, `minLength`, ...) that a reply within the budget can meet.
fn count(schema: &Map<String, Value>, key: &str, most: usize, what: &str) -> Result<usize, String> {
    let Some(wanted) = schema.get(key).and_then(Value::as_u64) else {
        return Ok(0);
    };
    match usize::try_from(wanted) {
        Ok(wanted) if wanted <= most => Ok(wanted),
        _ => Err(format!(
            "{key} {wanted} asks for more than the {most} {what} a fake reply may hold"
        )),
    }
}

/// The schema's type, inferring one from the keywords when `type` is absent.
fn schema_type(schema: &Map<String, Value>) -> &str {
    match schema.get("type") {
        Some(Value::String(kind)) => kind,
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|kind| *kind != "null")
            .unwrap_or("null"),
        _ if schema.contains_key("properties") || schema.contains_key("required") => "object",
        _ if schema.contains_key("items") => "array",
        _ => "string",
    }
}

/// A JSON number rounded to a whole one within `i64`, widened so that a step past either end
/// cannot overflow (`as` from `f64` saturates).
fn whole(number: f64) -> i128 {
    (number as i128).clamp(i128::from(i64::MIN), i128::from(i64::MAX))
}

fn integer(schema: &Map<String, Value>, seed: u64) -> Value {
    let mut low = bound(schema, "minimum").map(|m| whole(m.ceil()));
    if let Some(exclusive) = bound(schema, "exclusiveMinimum") {
        let above = whole(exclusive.floor()) + 1;
        low = Some(low.map_or(above, |low| low.max(above)));
    }
    let mut high = bound(schema, "maximum").map(|m| whole(m.floor()));
    if let Some(exclusive) = bound(schema, "exclusiveMaximum") {
        let below = whole(exclusive.ceil()) - 1;
        high = Some(high.map_or(below, |high| high.min(below)));
    }
    let step = match bound(schema, "multipleOf") {
        Some(m) if m >= 1.0 && m.fract() == 0.0 => whole(m),
        _ => 1,
    };
    let (low, high) = match (low, high) {
        (Some(low), Some(high)) => (low, high),
        (Some(low), None) => (low, low + 100),
        (None, Some(high)) => (high - 100, high),
        (None, None) => (0, 100),
    };
    // The multiples of `step` from `low` up: the first, and how many fit below `high`. Every
    // quantity stays within a few times `i64`, far inside `i128`.
    let first = -(-low).div_euclid(step) * step;
    let fitting = if high >= first {
        (high - first) / step + 1
    } else {
        // None fits; `first` is the nearest try, and validation will say what is wrong.
        1
    };
    let value = first + i128::from(seed) % fitting * step;
    match i64::try_from(value) {
        Ok(value) => json!(value),
        Err(_) => json!(value as f64),
    }
}

fn number(schema: &Map<String, Value>, seed: u64) -> Value {
    if bound(schema, "multipleOf").is_some() {
        return integer(schema, seed);
    }
    let tightest = |a: Option<f64>, b: Option<f64>, pick: fn(f64, f64) -> f64| match (a, b) {
        (Some(a), Some(b)) => Some(pick(a, b)),
        (a, b) => a.or(b),
    };
    let low = tightest(
        bound(schema, "minimum"),
        bound(schema, "exclusiveMinimum"),
        f64::max,
    );
    let high = tightest(
        bound(schema, "maximum"),
        bound(schema, "exclusiveMaximum"),
        f64::min,
    );
    let low = low.unwrap_or_else(|| high.map_or(0.0, |h| h - 1.0));
    let high = high.unwrap_or(low + 1.0).max(low);
    // A point strictly inside the range satisfies both inclusive and exclusive bounds. Where
    // `high - low` overflows, a weighted sum stays finite.
    let fraction = 0.25 + (seed % 50) as f64 / 100.0;
    let width = high - low;
    let value = if high <= low {
        low
    } else if width.is_finite() {
        low + width * fraction
    } else {
        low * (1.0 - fraction) + high * fraction
    };
    json!(value)
}

fn slug(name: &str) -> String {
    let slug: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_lowercase();
    if slug.is_empty() { "item".into() } else { slug }
}

fn bound(schema: &Map<String, Value>, key: &str) -> Option<f64> {
    schema.get(key).and_then(Value::as_f64)
}

/// Derives a child seed, so siblings get different values.
fn mix(seed: u64, salt: u64) -> u64 {
    let mut x = seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_valid(schema: Value) {
        let validator = jsonschema::validator_for(&schema).expect("a valid schema");
        for seed in 0..40 {
            let value = value_for(&schema, seed).expect("a value");
            let errors: Vec<String> = validator
                .iter_errors(&value)
                .map(|e| e.to_string())
                .collect();
            assert!(
                errors.is_empty(),
                "seed {seed}: {value} fails {schema}: {errors:?}"
            );
        }
    }

    #[test]
    fn objects_with_required_and_nested_properties_validate() {
        assert_valid(json!({
            "type": "object",
            "properties": {
                "title": {"type": "string", "minLength": 3, "maxLength": 20},
                "score": {"type": "integer", "minimum": 1, "maximum": 5},
                "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 3, "uniqueItems": true},
                "verdict": {"enum": ["approve", "reject", "revise"]},
                "meta": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
                "maybe": {"type": ["null", "integer"], "multipleOf": 5, "minimum": 7}
            },
            "required": ["title", "score", "verdict", "meta", "extra"],
            "additionalProperties": true
        }));
    }

    #[test]
    fn refs_combinators_and_formats_validate() {
        assert_valid(json!({
            "$defs": {"step": {"type": "object", "properties": {
                "id": {"type": "string", "format": "uuid"},
                "when": {"type": "string", "format": "date"},
                "next": {"$ref": "#/$defs/step"}
            }, "required": ["id"]}},
            "type": "object",
            "properties": {
                "plan": {"type": "array", "items": {"$ref": "#/$defs/step"}, "maxItems": 1},
                "either": {"anyOf": [{"type": "integer", "maximum": -3}, {"type": "string"}]},
                "below": {"type": "number", "exclusiveMaximum": -0.5},
                "both": {"allOf": [
                    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                    {"properties": {"b": {"const": "fixed"}}, "required": ["b"]}
                ]}
            },
            "required": ["plan", "either", "both"]
        }));
    }

    #[test]
    fn the_same_seed_gives_the_same_value() {
        let schema = json!({"type": "object", "properties": {"x": {"type": "number"}}});
        assert_eq!(value_for(&schema, 7), value_for(&schema, 7));
        assert_ne!(value_for(&schema, 7), value_for(&schema, 8));
    }

    #[test]
    fn huge_bounds_and_steps_give_valid_integers_and_numbers() {
        assert_valid(json!({"type": "integer", "minimum": -1e19, "maximum": 1e19}));
        assert_valid(json!({"type": "integer", "minimum": -1e300}));
        assert_valid(json!({"type": "integer", "minimum": 1e15, "multipleOf": 7}));
        assert_valid(json!({"type": "integer", "maximum": -1e15, "multipleOf": 1024}));
        assert_valid(json!({"type": "integer", "minimum": -20, "maximum": -3, "multipleOf": 4}));
        assert_valid(json!({"type": "number", "minimum": -1.7e308, "maximum": 1.7e308}));
        assert_valid(json!({"type": "number", "minimum": 1, "exclusiveMinimum": 2, "maximum": 3}));
    }

    #[test]
    fn min_properties_are_met_with_extra_properties() {
        assert_valid(json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "minProperties": 4,
            "additionalProperties": {"type": "boolean"}
        }));
        assert_valid(json!({"type": "object", "minProperties": 2, "maxProperties": 2}));
    }

    #[test]
    fn a_wide_recursive_schema_gets_a_small_valid_value_or_an_error() {
        let wide = |width: usize| {
            let properties: Map<String, Value> = (0..width)
                .map(|i| (format!("p{i}"), json!({"$ref": "#"})))
                .collect();
            json!({"type": "object", "properties": properties})
        };
        // Filled out, it would expand ~100^6 times; checking even `{}` against the widest
        // compiles too much, so it is refused, quickly.
        assert_valid(wide(20));
        assert_eq!(value_for(&wide(50), 1), Ok(json!({})));
        assert_refused(
            wide(100),
            "checking a reply against this schema would compile",
        );
    }

    #[test]
    fn an_optional_property_the_builder_gets_wrong_is_left_out() {
        let schema = json!({"type": "object", "properties": {
            "code": {"type": "string", "pattern": "^[0-9]{3}$"},
            "note": {"type": "string"}
        }});
        assert_eq!(value_for(&schema, 1), Ok(json!({})));
    }

    #[test]
    fn a_schema_the_validator_would_never_finish_is_refused() {
        assert_refused(
            json!({"anyOf": [{"$ref": "#"}, {"type": "string"}]}),
            "checking a reply against this schema would",
        );
        assert_refused(
            json!({"$ref": "#/$defs/a%20b", "$defs": {"a b": {}}}),
            "only local JSON pointers",
        );
    }

    /// Asserts that building fails with a message containing `expected`, quickly.
    fn assert_refused(schema: Value, expected: &str) {
        let start = std::time::Instant::now();
        let err = value_for(&schema, 3).expect_err("no value");
        assert!(err.contains(expected), "{schema}: {err}");
        assert!(
            start.elapsed() < std::time::Duration::from_secs(2),
            "{schema}: {:?}",
            start.elapsed()
        );
    }

    #[test]
    fn counts_and_lengths_beyond_the_budget_are_refused_before_allocating() {
        assert_refused(
            json!({"type": "string", "minLength": 100_000_000_000u64}),
            "minLength 100000000000 asks for more than the 262144 bytes of text",
        );
        assert_refused(
            json!({"type": "array", "minItems": 1_000_000_000}),
            "minItems 1000000000 asks for more than the 10000 values",
        );
        assert_refused(
            json!({"type": "object", "minProperties": u64::MAX}),
            "minProperties 18446744073709551615",
        );
        // Each count within the budget, together beyond it.
        assert_refused(
            json!({"type": "array", "minItems": 100, "items": {"type": "string", "minLength": 10_000}}),
            "more than 256 KiB of text",
        );
        assert_refused(
            json!({"type": "array", "minItems": 5000, "items": {"type": "array", "minItems": 5000}}),
            "more than 10000 JSON values",
        );
    }

    #[test]
    fn schemas_that_expand_without_end_are_refused() {
        let wide: Map<String, Value> = (0..100)
            .map(|i| (format!("p{i}"), json!({"$ref": "#"})))
            .collect();
        let names: Vec<String> = wide.keys().cloned().collect();
        assert_refused(
            json!({"type": "object", "properties": wide, "required": names}),
            "more than 10000 JSON values",
        );
        // A large constant behind a recursive reference.
        let big = "x".repeat(200_000);
        assert_refused(
            json!({"$defs": {"big": {"const": big}}, "type": "array", "minItems": 2, "items": {"$ref": "#/$defs/big"}}),
            "more than 256 KiB of text",
        );
        // `allOf` over a large schema, again and again, without producing a value.
        let large: Map<String, Value> = (0..5000)
            .map(|i| (format!("k{i}"), json!({"type": "integer"})))
            .collect();
        assert_refused(
            json!({
                "type": "array", "minItems": 1000,
                "items": {"allOf": [{"properties": large}], "type": "null"}
            }),
            "steps to expand",
        );
    }

    #[test]
    fn values_the_builder_gets_wrong_are_refused_not_returned() {
        for schema in [
            json!({"type": "string", "pattern": "^[0-9]{3}-[0-9]{4}$"}),
            json!({"type": "string", "format": "ipv4", "maxLength": 3}),
            json!({"oneOf": [{"type": "integer"}, {"type": "number"}]}),
            json!({"type": "integer", "minimum": 5, "maximum": 4}),
            json!({"type": "integer", "exclusiveMaximum": -9.3e18}),
            json!({"type": "object", "minProperties": 3, "additionalProperties": false}),
        ] {
            assert_refused(schema, "does not match");
        }
    }

    #[test]
    fn a_pattern_gets_a_valid_value_or_an_error() {
        for pattern in ["^value", "^[0-9]{3}$", "^(a|b)+$", "value [0-9]+", "^[A-Z]"] {
            let schema = json!({"type": "object", "properties": {"value": {"type": "string", "pattern": pattern}}, "required": ["value"]});
            let validator = jsonschema::validator_for(&schema).unwrap();
            for seed in 0..20 {
                match value_for(&schema, seed) {
                    Ok(value) => assert!(validator.is_valid(&value), "{pattern}: {value}"),
                    Err(err) => assert!(err.contains("does not match"), "{pattern}: {err}"),
                }
            }
        }
    }
}
