//! The longest JSON text a value valid under a schema can have, when the schema bounds it: the
//! ceiling a plan puts on a structured reply's output tokens (no token covers less than one
//! byte, so bytes bound tokens).
//!
//! Only what the schema itself pins down counts: `const`, `enum`, booleans, null, integers
//! between two bounds, strings with a `maxLength`, arrays with a `maxItems` and objects that
//! list their `properties` and forbid others (`additionalProperties: false`). Anything else —
//! a plain `{"type": "string"}`, an object open to more keys, references, combinators other than
//! `anyOf`/`oneOf` of bounded branches — is unbounded, and the leaf's output limit applies.

use serde_json::Value;

/// The most bytes a string character can take in JSON text: a control character written as
/// `\u00XX` (other characters take at most four bytes of UTF-8).
const BYTES_PER_CHAR: u64 = 6;

/// The longest JSON text of a number that is not an integer with bounds: Python's `repr` of a
/// float is at most 24 characters (`-2.2250738585072014e-308`).
const FLOAT_BYTES: u64 = 24;

/// Nesting deeper than this is not followed (unbounded): real reply schemas nest a few levels.
const MAX_DEPTH: usize = 32;

/// The most bytes a value valid under `schema` can take as compact JSON text, or `None` when
/// the schema does not bound it.
pub fn max_json_bytes(schema: &Value) -> Option<u64> {
    bound(schema, 0)
}

fn bound(schema: &Value, depth: usize) -> Option<u64> {
    if depth > MAX_DEPTH {
        return None;
    }
    let schema = schema.as_object()?;
    if let Some(value) = schema.get("const") {
        return Some(value.to_string().len() as u64);
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return values.iter().map(|v| v.to_string().len() as u64).max();
    }
    for combinator in ["anyOf", "oneOf"] {
        if let Some(branches) = schema.get(combinator).and_then(Value::as_array) {
            let mut most = 0;
            for branch in branches {
                most = most.max(bound(branch, depth + 1)?);
            }
            return Some(most);
        }
    }
    if schema.contains_key("$ref") || schema.contains_key("allOf") || schema.contains_key("not") {
        return None;
    }
    match schema.get("type")?.as_str()? {
        "null" => Some(4),
        "boolean" => Some(5),
        "integer" => {
            let digits = |key: &str| schema.get(key).map(|n| n.to_string().len() as u64);
            Some(digits("minimum")?.max(digits("maximum")?))
        }
        "number" => Some(FLOAT_BYTES),
        "string" => {
            let chars = schema.get("maxLength")?.as_u64()?;
            chars.checked_mul(BYTES_PER_CHAR)?.checked_add(2)
        }
        "array" => {
            let items = schema.get("maxItems")?.as_u64()?;
            let item = bound(schema.get("items")?, depth + 1)?;
            // `[` and `]`, and a comma after every item but the last.
            items.checked_mul(item.checked_add(1)?)?.checked_add(2)
        }
        "object" => {
            if schema.get("additionalProperties") != Some(&Value::Bool(false)) {
                return None;
            }
            let properties = match schema.get("properties") {
                Some(properties) => properties.as_object()?,
                None => return Some(2),
            };
            // `{` and `}`, and per property its quoted key, a colon and a comma.
            let mut total: u64 = 2;
            for (key, property) in properties {
                let key = Value::String(key.clone()).to_string().len() as u64;
                total = total
                    .checked_add(key + 2)?
                    .checked_add(bound(property, depth + 1)?)?;
            }
            Some(total)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn pinned_down_schemas_are_bounded_by_their_longest_value() {
        assert_eq!(
            max_json_bytes(&json!({"enum": ["approve", "revise"]})),
            Some(9)
        );
        assert_eq!(max_json_bytes(&json!({"const": 2})), Some(1));
        assert_eq!(max_json_bytes(&json!({"type": "boolean"})), Some(5));
        assert_eq!(
            max_json_bytes(&json!({"type": "integer", "minimum": -5, "maximum": 100})),
            Some(3)
        );
        assert_eq!(
            max_json_bytes(&json!({"type": "string", "maxLength": 10})),
            Some(62)
        );
        let verdict = json!({
            "type": "object",
            "properties": {"ok": {"type": "boolean"}, "tags": {
                "type": "array", "maxItems": 2, "items": {"enum": ["a", "bb"]}}},
            "additionalProperties": false
        });
        // {"ok":false,"tags":["bb","bb"]} is 31 bytes; the bound allows a trailing comma each.
        let bound = max_json_bytes(&verdict).unwrap();
        assert!((31..=40).contains(&bound), "{bound}");
    }

    #[test]
    fn open_schemas_are_unbounded() {
        for schema in [
            json!({"type": "string"}),
            json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
            json!({"type": "array", "items": {"type": "boolean"}}),
            json!({"type": "integer", "minimum": 0}),
            json!({"$ref": "#"}),
            json!({"anyOf": [{"type": "boolean"}, {"type": "string"}]}),
            json!(true),
        ] {
            assert_eq!(max_json_bytes(&schema), None, "{schema}");
        }
    }
}
