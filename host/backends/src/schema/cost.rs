//! How much the `jsonschema` validator would spend checking a value against an untrusted
//! schema, estimated from above before anything is compiled.
//!
//! The validator has no limits of its own. It compiles a `$ref` in place the first time it meets
//! it, and every later occurrence lazily, the first time a value reaches it, into a fresh copy
//! of the target holding copies of the target's own references; so each level of a recursive
//! value may compile the schema again. A small schema can thus make it compile without end
//! (`{"anyOf": [{"$ref": "#"}, {"type": "string"}]}` never finishes) or without bound (a hundred
//! `{"$ref": "#"}` properties, checked against a deep value). [`check`] walks the paths the
//! validator would take, counting the schema nodes it would compile or copy (memory, about a
//! KiB each) and the (schema, value) pairs it would evaluate (time), and stops at a budget;
//! `value` and `validate` call it before validating. A regex match the engine cannot finish (it
//! has a backtracking limit) makes the validator evaluate the whole value again under each
//! outcome, up to [`RUNS_WITH_PATTERNS`] times in all, so with a pattern in the schema every pair
//! counts as that many.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

/// The most schema nodes one check may compile or copy: a few tens of MiB.
const MAX_COMPILED: usize = 40_000;

/// The most (schema, value) pairs one check may evaluate: milliseconds.
const MAX_EVALUATED: usize = 1_000_000;

/// The most times the validator evaluates a value when regex matches go unfinished (jsonschema's
/// limit on the outcomes it assumes).
const RUNS_WITH_PATTERNS: usize = 64;

/// The deepest the validator may recurse, compiling or evaluating: each level takes a few KiB
/// of stack, and a runtime worker has 2 MiB. Real schemas and values nest a dozen levels; a
/// chain of a thousand `$ref`s (32 KiB of schema) would overflow the stack and abort the host.
const MAX_DEPTH: usize = 128;

/// Refuses to validate `value` against `schema` when that would take too much memory or time,
/// or when the schema uses what the estimate cannot follow (references other than local JSON
/// pointers, nested identifiers, dynamic references, `unevaluated*`).
pub(crate) fn check(schema: &Value, value: &Value) -> Result<(), String> {
    unsupported(schema)?;
    let mut estimate = Estimate {
        root: schema,
        compiled: 0,
        evaluated: 0,
        step_cost: if has_patterns(schema) {
            RUNS_WITH_PATTERNS
        } else {
            1
        },
        instances: HashSet::new(),
        costs: HashMap::new(),
    };
    // Building the validator compiles the root, as a reference to it would.
    let root = estimate.compile_cost("#", 0)?;
    estimate.compile(root)?;
    estimate.evaluate(schema, value, 0, 0)
}

/// How many JSON values `values` hold, nested ones included, counting no further than `most`.
pub(crate) fn weight<'v>(values: impl IntoIterator<Item = &'v Value>, most: usize) -> usize {
    let mut total = 0;
    let mut pending: Vec<&Value> = values.into_iter().collect();
    while let Some(value) = pending.pop() {
        total += 1;
        if total >= most {
            break;
        }
        match value {
            Value::Array(items) => pending.extend(items),
            Value::Object(map) => pending.extend(map.values()),
            _ => {}
        }
    }
    total
}

struct Estimate<'a> {
    root: &'a Value,
    /// Schema nodes compiled or copied so far, against [`MAX_COMPILED`].
    compiled: usize,
    /// (schema, value) pairs evaluated so far, each counted `step_cost` times, against
    /// [`MAX_EVALUATED`].
    evaluated: usize,
    /// How many times the validator may evaluate each pair: [`RUNS_WITH_PATTERNS`] when the
    /// schema has a pattern, else once.
    step_cost: usize,
    /// The compiled references met so far, each named by the chain of references leading to
    /// it: the validator compiles a reference once per place in its tree, however many
    /// values pass through it.
    instances: HashSet<u64>,
    /// What compiling each reference's target costs, and how deep compiling it recurses, by
    /// reference.
    costs: HashMap<&'a str, Compiled>,
}

impl<'a> Estimate<'a> {
    fn compile(&mut self, nodes: usize) -> Result<(), String> {
        self.compiled = self.compiled.saturating_add(nodes);
        if self.compiled > MAX_COMPILED {
            return Err(too_costly(format!(
                "compile more than {MAX_COMPILED} schema nodes"
            )));
        }
        Ok(())
    }

    fn step(&mut self) -> Result<(), String> {
        self.evaluated = self.evaluated.saturating_add(self.step_cost);
        if self.evaluated > MAX_EVALUATED {
            return Err(too_costly(format!("take more than {MAX_EVALUATED} steps")));
        }
        Ok(())
    }

    /// The schema nodes compiling `reference`'s target creates: its own, those of each
    /// reference it meets first (compiled in place, one level deeper), and a copy of the
    /// target for each one it meets again (to be compiled lazily). `depth` is how deep the
    /// validator already is when it compiles.
    fn compile_cost(&mut self, reference: &'a str, depth: usize) -> Result<usize, String> {
        let compiled = match self.costs.get(reference) {
            Some(compiled) => *compiled,
            None => {
                let compiled = self.compile_walk(reference)?;
                self.costs.insert(reference, compiled);
                compiled
            }
        };
        if depth + compiled.depth > MAX_DEPTH {
            return Err(too_deep());
        }
        Ok(compiled.nodes)
    }

    fn compile_walk(&self, reference: &'a str) -> Result<Compiled, String> {
        let mut compiled = Compiled { nodes: 0, depth: 0 };
        let mut seen = HashSet::new();
        let mut pending = vec![(target(self.root, reference)?, 0)];
        while let Some((schema, depth)) = pending.pop() {
            compiled.nodes += 1;
            compiled.depth = compiled.depth.max(depth);
            if compiled.nodes > MAX_COMPILED {
                return Err(too_costly(format!(
                    "compile more than {MAX_COMPILED} schema nodes"
                )));
            }
            if depth > MAX_DEPTH {
                return Err(too_deep());
            }
            let Value::Object(schema) = schema else {
                continue;
            };
            let mut children = Vec::new();
            push_subschemas(schema, &mut children);
            pending.extend(children.into_iter().map(|child| (child, depth + 1)));
            if let Some(inner) = schema.get("$ref").and_then(Value::as_str) {
                let resolved = target(self.root, inner)?;
                if seen.insert(inner) {
                    pending.push((resolved, depth + 1));
                } else {
                    compiled.nodes = compiled
                        .nodes
                        .saturating_add(weight([resolved], MAX_COMPILED + 1));
                }
            }
        }
        Ok(compiled)
    }

    /// Follows the validator over `value`: every subschema that applies to it in place, and
    /// those that apply to its members. Every branch counts, as `iter_errors` takes them all.
    /// `instance` names the chain of references that led here.
    fn evaluate(
        &mut self,
        schema: &'a Value,
        value: &Value,
        instance: u64,
        depth: usize,
    ) -> Result<(), String> {
        self.step()?;
        if depth > MAX_DEPTH {
            return Err(too_deep());
        }
        let Value::Object(schema) = schema else {
            return Ok(());
        };
        let deeper = depth + 1;
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            let here = instance_of(instance, schema);
            if self.instances.insert(here) {
                let cost = self.compile_cost(reference, depth)?;
                self.compile(cost)?;
            }
            self.evaluate(target(self.root, reference)?, value, here, deeper)?;
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            for branch in schema
                .get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                self.evaluate(branch, value, instance, deeper)?;
            }
        }
        for key in ["not", "if", "then", "else"] {
            if let Some(branch) = schema.get(key) {
                self.evaluate(branch, value, instance, deeper)?;
            }
        }
        for key in ["dependentSchemas", "dependencies"] {
            let branches = schema.get(key).and_then(Value::as_object);
            for branch in branches.into_iter().flat_map(Map::values) {
                self.evaluate(branch, value, instance, deeper)?;
            }
        }
        match value {
            Value::Object(members) => {
                let properties = schema.get("properties").and_then(Value::as_object);
                let patterns = schema.get("patternProperties").and_then(Value::as_object);
                for (name, member) in members {
                    self.step()?;
                    if let Some(property) = properties.and_then(|p| p.get(name)) {
                        self.evaluate(property, member, instance, deeper)?;
                    }
                    for pattern in patterns.into_iter().flat_map(Map::values) {
                        self.evaluate(pattern, member, instance, deeper)?;
                    }
                    if let Some(additional) = schema.get("additionalProperties") {
                        self.evaluate(additional, member, instance, deeper)?;
                    }
                    if let Some(names) = schema.get("propertyNames") {
                        self.evaluate(names, &Value::String(name.clone()), instance, deeper)?;
                    }
                }
            }
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    self.step()?;
                    let positional = match schema.get("items") {
                        Some(Value::Array(tuple)) => tuple.get(index),
                        _ => schema.get("prefixItems").and_then(|p| p.get(index)),
                    };
                    let every = match schema.get("items") {
                        Some(Value::Array(_)) | None => None,
                        every => every,
                    };
                    let each = [
                        positional,
                        every,
                        schema.get("additionalItems"),
                        schema.get("contains"),
                    ];
                    for applies in each.into_iter().flatten() {
                        self.evaluate(applies, item, instance, deeper)?;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// What compiling one reference's target takes.
#[derive(Debug, Clone, Copy)]
struct Compiled {
    /// Schema nodes compiled or copied.
    nodes: usize,
    /// How deep the compiler recurses, in schema levels and references followed in place.
    depth: usize,
}

/// Names the compiled reference at `schema` reached through `parent`: nodes of the one schema
/// document differ by address, and chains by the hash.
fn instance_of(parent: u64, schema: &Map<String, Value>) -> u64 {
    let address = std::ptr::from_ref(schema) as usize as u64;
    let mut x = parent.rotate_left(29) ^ address.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 31;
    x.wrapping_mul(0xbf58_476d_1ce4_e5b9)
}

fn too_deep() -> String {
    too_costly(format!("recurse more than {MAX_DEPTH} levels deep"))
}

fn too_costly(what: String) -> String {
    format!("checking a reply against this schema would {what} (is it recursive, or very wide?)")
}

/// The subschema a local reference (`#` or `#/json/pointer`) names.
fn target<'a>(root: &'a Value, reference: &str) -> Result<&'a Value, String> {
    reference
        .strip_prefix('#')
        .filter(|pointer| pointer.is_empty() || pointer.starts_with('/'))
        .and_then(|pointer| root.pointer(pointer))
        .ok_or_else(|| {
            format!(
                "the $ref {reference:?} does not name a part of this schema (only local JSON \
                 pointers such as \"#/$defs/item\" are supported)"
            )
        })
}

/// The subschemas the validator compiles along with `schema` (`$defs` only when referenced).
fn push_subschemas<'v>(schema: &'v Map<String, Value>, out: &mut Vec<&'v Value>) {
    for (key, value) in schema {
        match (key.as_str(), value) {
            (
                "additionalProperties"
                | "propertyNames"
                | "additionalItems"
                | "contains"
                | "not"
                | "if"
                | "then"
                | "else"
                | "items",
                Value::Object(_) | Value::Bool(_),
            ) => out.push(value),
            ("allOf" | "anyOf" | "oneOf" | "prefixItems" | "items", Value::Array(list)) => {
                out.extend(list);
            }
            (
                "properties" | "patternProperties" | "dependentSchemas" | "dependencies",
                Value::Object(map),
            ) => out.extend(map.values().filter(|v| v.is_object() || v.is_boolean())),
            _ => {}
        }
    }
}

/// Whether the schema document has a `pattern` or `patternProperties` anywhere (`$defs` and
/// unreferenced parts included, and a property that happens to be named so: the count errs on
/// the safe side).
fn has_patterns(root: &Value) -> bool {
    let mut pending = vec![root];
    while let Some(value) = pending.pop() {
        match value {
            Value::Object(map) => {
                if map.get("pattern").is_some_and(Value::is_string)
                    || map.get("patternProperties").is_some_and(Value::is_object)
                {
                    return true;
                }
                pending.extend(map.values());
            }
            Value::Array(items) => pending.extend(items),
            _ => {}
        }
    }
    false
}

/// What the estimate cannot follow, anywhere in the schema (`$defs` included): a reference
/// that is not a local JSON pointer, an identifier below the root (it would change what `#`
/// means there), a dynamic reference, or `unevaluated*` (which compiles the schema again).
fn unsupported(root: &Value) -> Result<(), String> {
    let mut pending = vec![(root, true)];
    while let Some((schema, is_root)) = pending.pop() {
        let Value::Object(schema) = schema else {
            continue;
        };
        for keyword in [
            "$dynamicRef",
            "$recursiveRef",
            "unevaluatedProperties",
            "unevaluatedItems",
        ] {
            if schema.contains_key(keyword) {
                return Err(format!("{keyword} is not supported"));
            }
        }
        if !is_root {
            for keyword in ["$id", "id", "$anchor", "$dynamicAnchor", "$recursiveAnchor"] {
                if schema.get(keyword).is_some_and(Value::is_string) {
                    return Err(format!("{keyword} is not supported below the root"));
                }
            }
        }
        if let Some(reference) = schema.get("$ref") {
            let reference = reference.as_str().ok_or("a $ref must be a string")?;
            target(root, reference)?;
        }
        let mut children = Vec::new();
        push_subschemas(schema, &mut children);
        for key in ["$defs", "definitions"] {
            children.extend(
                schema
                    .get(key)
                    .and_then(Value::as_object)
                    .into_iter()
                    .flat_map(Map::values),
            );
        }
        pending.extend(children.into_iter().map(|child| (child, false)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ordinary_schemas_and_large_values_are_cheap() {
        let schema = json!({
            "$defs": {"step": {"type": "object", "properties": {"next": {"$ref": "#/$defs/step"}}}},
            "type": "object",
            "properties": {"plan": {"type": "array", "items": {"$ref": "#/$defs/step"}}},
        });
        let value = json!({"plan": [{"next": {"next": {}}}, {}]});
        check(&schema, &value).unwrap();
        // Items through one reference compile it once, however many there are.
        let many: Vec<Value> = (0..5000).map(|_| json!({"next": {}})).collect();
        check(&schema, &json!({"plan": many})).unwrap();
    }

    #[test]
    fn a_pattern_makes_every_step_count_for_each_run_the_validator_may_take() {
        let items = |n: usize| json!({"items": (0..n).collect::<Vec<_>>()});
        let plain = json!({"properties": {"items": {"items": {"type": "integer"}}}});
        let patterned = json!({"properties": {"items": {"items": {"type": "integer"}},
                                              "name": {"type": "string", "pattern": "^(a|a)*b$"}}});
        check(&plain, &items(100_000)).unwrap();
        check(&patterned, &items(1_000)).unwrap();
        let err = check(&patterned, &items(100_000)).unwrap_err();
        assert!(err.contains("take more than 1000000 steps"), "{err}");
        let named = json!({"$defs": {"p": {"patternProperties": {"^x": {}}}}});
        assert!(has_patterns(&named));
        assert!(!has_patterns(&plain));
    }

    #[test]
    fn a_reference_to_itself_in_place_is_refused() {
        let schema = json!({"anyOf": [{"$ref": "#"}, {"type": "string"}]});
        let err = check(&schema, &json!("x")).unwrap_err();
        assert!(
            err.contains("checking a reply against this schema would"),
            "{err}"
        );
    }

    #[test]
    fn wide_recursion_costs_per_object_reached_through_it() {
        let wide: Map<String, Value> = (0..50)
            .map(|i| (format!("p{i}"), json!({"$ref": "#"})))
            .collect();
        let schema = json!({"type": "object", "properties": wide});
        // Each compile of the root copies it 49 times: some 5000 nodes.
        check(&schema, &json!({})).unwrap();
        check(&schema, &json!({"p1": {"p2": {}}})).unwrap();
        let eight: Map<String, Value> = (0..8).map(|i| (format!("p{i}"), json!({}))).collect();
        let err = check(&schema, &Value::Object(eight)).unwrap_err();
        assert!(
            err.contains("compile more than 40000 schema nodes"),
            "{err}"
        );
    }

    #[test]
    fn a_long_chain_of_references_is_refused_even_where_no_value_goes() {
        let chain = |length: usize| {
            let mut defs: Map<String, Value> = (0..length)
                .map(|i| {
                    (
                        format!("d{i}"),
                        json!({"$ref": format!("#/$defs/d{}", i + 1)}),
                    )
                })
                .collect();
            defs.insert(format!("d{length}"), json!({"type": "string"}));
            json!({"$defs": defs, "properties": {"unused": {"$ref": "#/$defs/d0"}}})
        };
        check(&chain(20), &json!({})).unwrap();
        let err = check(&chain(1000), &json!({})).unwrap_err();
        assert!(err.contains("recurse more than 128 levels deep"), "{err}");
    }

    #[test]
    fn what_the_estimate_cannot_follow_is_refused() {
        for (schema, expected) in [
            (json!({"$ref": "#anchor"}), "only local JSON pointers"),
            (
                json!({"$ref": "https://example.com/s.json"}),
                "only local JSON pointers",
            ),
            (
                json!({"$ref": "#/$defs/missing"}),
                "only local JSON pointers",
            ),
            (
                json!({"$defs": {"a": {"$id": "a.json"}}}),
                "$id is not supported below the root",
            ),
            (
                json!({"items": {"$anchor": "x"}}),
                "$anchor is not supported below the root",
            ),
            (
                json!({"properties": {"a": {"$dynamicRef": "#x"}}}),
                "$dynamicRef",
            ),
            (
                json!({"unevaluatedProperties": false}),
                "unevaluatedProperties",
            ),
        ] {
            let err = check(&schema, &json!(null)).unwrap_err();
            assert!(err.contains(expected), "{schema}: {err}");
        }
        let identified =
            json!({"$id": "https://example.com/s.json", "properties": {"id": {"type": "string"}}});
        check(&identified, &json!({"id": "x"})).unwrap();
    }
}
