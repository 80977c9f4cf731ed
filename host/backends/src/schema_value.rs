//! Builds a JSON value that satisfies a JSON Schema, for offline backends.
//!
//! Covers what structured-output schemas use in practice: `type` (one or a list), objects with
//! `properties`/`required`, arrays with `items`/`minItems`/`maxItems`, `enum`, `const`, number
//! bounds (inclusive and exclusive, `multipleOf`), string lengths and a few `format`s, local
//! `$ref`s into `$defs`/`definitions`, and `anyOf`/`oneOf`/`allOf`. Values are derived from a
//! seed so the same request always gets the same reply.

use serde_json::{Map, Value, json};

/// Recursion bound for self-referential schemas: past it, optional parts are left out.
const MAX_DEPTH: usize = 24;

/// A value valid against `schema`, varied by `seed`.
pub(crate) fn value_for(schema: &Value, seed: u64) -> Value {
    Builder { root: schema }.build(schema, seed, "value", 0)
}

struct Builder<'a> {
    root: &'a Value,
}

impl Builder<'_> {
    fn build(&self, schema: &Value, seed: u64, name: &str, depth: usize) -> Value {
        let Value::Object(schema) = schema else {
            // `true` (or anything else) accepts every value.
            return Value::String(format!("{name} {}", seed % 1000));
        };
        if let Some(target) = schema.get("$ref").and_then(Value::as_str)
            && let Some(resolved) = self.resolve(target)
            && depth < MAX_DEPTH
        {
            return self.build(resolved, seed, name, depth + 1);
        }
        if let Some(value) = schema.get("const") {
            return value.clone();
        }
        if let Some(Value::Array(options)) = schema.get("enum")
            && !options.is_empty()
        {
            return options[(seed % options.len() as u64) as usize].clone();
        }
        if let Some(Value::Array(all)) = schema.get("allOf") {
            return self.build(
                &Value::Object(merge_all(schema, all)),
                seed,
                name,
                depth + 1,
            );
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
            "integer" => integer(schema, seed),
            "number" => number(schema, seed),
            "boolean" => Value::Bool(seed.is_multiple_of(2)),
            "null" => Value::Null,
            _ => string(schema, seed, name),
        }
    }

    fn object(&self, schema: &Map<String, Value>, seed: u64, depth: usize) -> Value {
        let mut out = Map::new();
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(Value::Object(properties)) = schema.get("properties") {
            for (index, (key, property)) in properties.iter().enumerate() {
                // Optional properties are filled too (a realistic reply has them), until a
                // recursive schema gets deep.
                if depth < MAX_DEPTH / 2 || required.contains(&key.as_str()) {
                    let child_seed = mix(seed, index as u64 + 1);
                    out.insert(
                        key.clone(),
                        self.build(property, child_seed, key, depth + 1),
                    );
                }
            }
        }
        for key in required {
            if !out.contains_key(key) {
                out.insert(
                    key.to_owned(),
                    Value::String(format!("{key} {}", seed % 1000)),
                );
            }
        }
        Value::Object(out)
    }

    fn array(&self, schema: &Map<String, Value>, seed: u64, name: &str, depth: usize) -> Value {
        let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
        let max = schema
            .get("maxItems")
            .and_then(Value::as_u64)
            .unwrap_or(u64::MAX);
        let wanted = if depth >= MAX_DEPTH { min } else { min.max(2) };
        let count = wanted.min(max);
        let unique = schema.get("uniqueItems").and_then(Value::as_bool) == Some(true);
        let items = schema.get("items").cloned().unwrap_or(Value::Bool(true));
        let mut out: Vec<Value> = Vec::new();
        let mut attempt = 0;
        while (out.len() as u64) < count && attempt < count * 4 + 8 {
            let value = self.build(&items, mix(seed, attempt + 101), name, depth + 1);
            attempt += 1;
            if unique && out.contains(&value) {
                continue;
            }
            out.push(value);
        }
        Value::Array(out)
    }

    /// Follows a local reference such as `#/$defs/step`.
    fn resolve(&self, target: &str) -> Option<&Value> {
        let pointer = target.strip_prefix('#')?;
        self.root.pointer(pointer)
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

fn merge_all(base: &Map<String, Value>, all: &[Value]) -> Map<String, Value> {
    let mut merged = base.clone();
    merged.remove("allOf");
    for part in all.iter().filter_map(Value::as_object) {
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
    merged
}

fn integer(schema: &Map<String, Value>, seed: u64) -> Value {
    let mut low = bound(schema, "minimum").map(f64::ceil);
    if let Some(exclusive) = bound(schema, "exclusiveMinimum") {
        low = Some(low.unwrap_or(f64::MIN).max(exclusive.floor() + 1.0));
    }
    let mut high = bound(schema, "maximum").map(f64::floor);
    if let Some(exclusive) = bound(schema, "exclusiveMaximum") {
        high = Some(high.unwrap_or(f64::MAX).min(exclusive.ceil() - 1.0));
    }
    let step = bound(schema, "multipleOf")
        .filter(|m| *m >= 1.0)
        .unwrap_or(1.0);
    let low = low.unwrap_or_else(|| high.map_or(0.0, |h| h - 100.0));
    let high = high.unwrap_or(low + 100.0).max(low);
    let span = ((high - low) / step).floor() as u64;
    let candidate = (low / step).ceil() * step + (seed % (span + 1)) as f64 * step;
    let value = if candidate > high {
        (low / step).ceil() * step
    } else {
        candidate
    };
    json!(value as i64)
}

fn number(schema: &Map<String, Value>, seed: u64) -> Value {
    if bound(schema, "multipleOf").is_some() {
        return integer(schema, seed);
    }
    let low = bound(schema, "minimum").or_else(|| bound(schema, "exclusiveMinimum"));
    let high = bound(schema, "maximum").or_else(|| bound(schema, "exclusiveMaximum"));
    let low = low.unwrap_or_else(|| high.map_or(0.0, |h| h - 1.0));
    let high = high.unwrap_or(low + 1.0).max(low);
    // A point strictly inside the range satisfies both inclusive and exclusive bounds.
    let fraction = 0.25 + (seed % 50) as f64 / 100.0;
    let value = if high > low {
        low + (high - low) * fraction
    } else {
        low
    };
    json!(value)
}

fn string(schema: &Map<String, Value>, seed: u64, name: &str) -> Value {
    let text = match schema.get("format").and_then(Value::as_str) {
        Some("date") => format!("2024-01-{:02}", seed % 28 + 1),
        Some("date-time") => format!("2024-01-{:02}T12:00:00Z", seed % 28 + 1),
        Some("email") => format!("{}@example.com", slug(name)),
        Some("uri") | Some("url") => format!("https://example.com/{}", slug(name)),
        Some("uuid") => format!("00000000-0000-4000-8000-{:012x}", seed & 0xffff_ffff_ffff),
        _ => format!("{name} {}", seed % 1000),
    };
    let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
    let max = schema
        .get("maxLength")
        .and_then(Value::as_u64)
        .map(|m| m as usize);
    let mut chars: Vec<char> = text.chars().collect();
    while chars.len() < min {
        chars.push('x');
    }
    if let Some(max) = max {
        chars.truncate(max);
    }
    Value::String(chars.into_iter().collect())
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
            let value = value_for(&schema, seed);
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
}
