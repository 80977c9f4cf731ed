//! JSON Schemas from scripts, in one place: whether a script's schema is usable at all
//! ([`check`], which the runtime calls before a leaf starts), what validating against it would
//! cost (`cost`), validation with errors that say where (`validate`), and a value that
//! satisfies it, for the offline backends (`value`), and the longest reply it allows
//! ([`max_json_bytes`], a plan's ceiling on a structured reply).
//!
//! Schemas come from untrusted scripts and the `jsonschema` validator has no limits of its own,
//! so nothing here compiles a schema before `cost` has found it affordable.

mod bound;
mod cost;
mod validate;
mod value;

use serde_json::Value;

pub use bound::max_json_bytes;
pub(crate) use validate::{ReplyValidator, schema_errors};
pub(crate) use value::value_for;

/// Why a JSON Schema cannot be used. The messages are the script's to read; each names the
/// schema as `schema`, the keyword argument it came in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// Neither an object nor a boolean.
    #[error("schema must be a JSON Schema object, such as {{\"type\": \"object\", ...}}")]
    NotASchema,
    /// It does not meta-validate (an unknown type, a negative length, ...).
    #[error("schema is not a valid JSON Schema: {message}")]
    Invalid {
        /// What the meta-validation said.
        message: String,
    },
    /// Building its validator, or validating a value with it, would take too much memory,
    /// stack or time, or it uses what the estimate cannot follow (a remote `$ref`).
    #[error("schema is too costly to use: {reason}")]
    TooCostly {
        /// What would be too costly.
        reason: String,
    },
    /// An offline backend cannot build a value that satisfies it (a `pattern` it does not
    /// produce, a value larger than a reply may be, an unsatisfiable schema).
    #[error("the fake backend cannot build a reply for this schema: {reason}")]
    Unsatisfiable {
        /// Why no value could be built.
        reason: String,
    },
}

/// Accepts a schema a script may use: an object or boolean that meta-validates and whose
/// validator is affordable to build.
pub fn check(schema: &Value) -> Result<(), SchemaError> {
    if !(schema.is_object() || schema.is_boolean()) {
        return Err(SchemaError::NotASchema);
    }
    jsonschema::meta::validate(schema).map_err(|error| SchemaError::Invalid {
        message: error.to_string(),
    })?;
    check_cost(schema)
}

/// What is wrong with a leaf's structured `reply` under `schema`, or `None` when it matches:
/// the check the agent loop makes before it accepts a reply, for backends that produce replies
/// some other way (an embedder's own code, say). Fails when the schema itself cannot be used.
pub fn reply_problems(schema: &Value, reply: &Value) -> Result<Option<String>, SchemaError> {
    Ok(validate::ReplyValidator::new(schema)?.problems(reply))
}

/// Refuses a schema whose validator would be too costly to build (memory, stack); [`check`]
/// includes this.
pub fn check_cost(schema: &Value) -> Result<(), SchemaError> {
    cost::check(schema, &Value::Null).map_err(|reason| SchemaError::TooCostly { reason })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_refusal_has_its_variant() {
        assert_eq!(check(&json!([1, 2])), Err(SchemaError::NotASchema));
        assert!(matches!(
            check(&json!({"type": "banana"})),
            Err(SchemaError::Invalid { .. })
        ));
        let endless = json!({"anyOf": [{"$ref": "#"}, {"type": "string"}]});
        let err = check(&endless).unwrap_err();
        assert!(matches!(err, SchemaError::TooCostly { .. }), "{err}");
        assert!(err.to_string().starts_with("schema is too costly to use: "));
        check(&json!({"type": "object"})).unwrap();
        check(&json!(true)).unwrap();
    }
}
