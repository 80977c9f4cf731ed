//! Validating values against a schema, with errors that say where in the value they are.

use serde_json::Value;

use super::{SchemaError, cost};

/// What is wrong with `value` by the validator's schema, each error with where it is; `None`
/// when the value is valid.
pub(crate) fn schema_errors(validator: &jsonschema::Validator, value: &Value) -> Option<String> {
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|error| {
            let at = error.instance_path().to_string();
            if at.is_empty() {
                error.to_string()
            } else {
                format!("{at}: {error}")
            }
        })
        .collect();
    (!errors.is_empty()).then(|| errors.join("; "))
}

/// A schema's validator for model replies, built once its cost was found affordable; each reply
/// is costed again before it is checked, since the cost depends on the value too.
pub(crate) struct ReplyValidator<'a> {
    schema: &'a Value,
    validator: jsonschema::Validator,
}

impl<'a> ReplyValidator<'a> {
    pub(crate) fn new(schema: &'a Value) -> Result<Self, SchemaError> {
        super::check_cost(schema)?;
        let validator =
            jsonschema::validator_for(schema).map_err(|error| SchemaError::Invalid {
                message: error.to_string(),
            })?;
        Ok(Self { schema, validator })
    }

    /// What is wrong with `value`, or `None`.
    pub(crate) fn problems(&self, value: &Value) -> Option<String> {
        if let Err(reason) = cost::check(self.schema, value) {
            return Some(format!(
                "the reply is too costly to check against the schema: {reason}"
            ));
        }
        schema_errors(&self.validator, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validator(schema: &str) -> jsonschema::Validator {
        jsonschema::validator_for(&serde_json::from_str(schema).unwrap()).unwrap()
    }

    fn valid(validator: &jsonschema::Validator, value: &str) -> bool {
        schema_errors(validator, &serde_json::from_str(value).unwrap()).is_none()
    }

    #[test]
    fn schemas_see_exact_numbers() {
        let exactly = validator(r#"{"const": 1180591620717411303424}"#);
        assert!(valid(&exactly, "1180591620717411303424"));
        assert!(!valid(&exactly, "1180591620717411303425"));
        assert!(!valid(&exactly, "1180591620717411303423"));
        let listed = validator(r#"{"enum": [-36893488147419103232, 0.21599615170364495]}"#);
        assert!(valid(&listed, "-36893488147419103232"));
        assert!(!valid(&listed, "-36893488147419103231"));
        assert!(valid(&listed, "0.21599615170364495"));
        assert!(!valid(&listed, "0.21599615170364497"));
        let bounded =
            validator(r#"{"type": "integer", "maximum": 1180591620717411303424, "minimum": 0}"#);
        assert!(valid(&bounded, "1180591620717411303424"));
        assert!(!valid(&bounded, "1180591620717411303425"));
        assert!(!valid(&bounded, "1180591620717411303423.5"));
        let integer = validator(r#"{"type": "integer"}"#);
        assert!(valid(&integer, "1180591620717411303424"));
        assert!(valid(&integer, "-36893488147419103232"));
        assert!(!valid(&integer, "0.21599615170364495"));
        let zero = validator(r#"{"const": 0}"#);
        assert!(valid(&zero, "-0.0"), "-0.0 is the number zero");
    }

    #[test]
    fn numbers_past_f64_never_panic_the_validator() {
        // Schemas and replies come from scripts and models: whatever the numbers, an answer.
        let huge = [
            "1e400",
            "-1e400",
            "1e-400",
            &"9".repeat(400),
            "1180591620717411303424.5",
        ];
        for keyword in [
            "const",
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "multipleOf",
        ] {
            for bound in huge {
                let Ok(validator) = jsonschema::validator_for(
                    &serde_json::from_str(&format!(r#"{{"{keyword}": {bound}}}"#)).unwrap(),
                ) else {
                    continue;
                };
                for value in huge.iter().chain(&["0", "-0.0", "5e-324", "1"]) {
                    valid(&validator, value);
                }
            }
        }
        for value in huge {
            valid(&validator(r#"{"type": "integer"}"#), value);
            valid(&validator(r#"{"enum": [1e400, 2]}"#), value);
        }
    }
}
