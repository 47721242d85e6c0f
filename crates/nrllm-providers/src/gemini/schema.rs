//! Gemini's function declarations take a subset of OpenAPI's schema, not JSON Schema: a tool's
//! schema is reduced to it before it goes out.

use serde_json::{json, Map, Value};

/// The keys of Gemini's `Schema` object this adapter passes on; everything else in a JSON Schema
/// (`additionalProperties`, `$schema`, `title`, `pattern`, …) is dropped, because Gemini answers
/// 400 to fields it does not know.
const KEPT_KEYS: &[&str] = &[
    "type",
    "format",
    "description",
    "nullable",
    "enum",
    "properties",
    "required",
    "items",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "anyOf",
];

/// Formats Gemini accepts, per type; other formats (`uint32`, `email`, …) are dropped.
fn format_allowed(kind: &str, format: &str) -> bool {
    matches!(
        (kind, format),
        ("integer", "int32" | "int64")
            | ("number", "float" | "double")
            | ("string", "enum" | "date-time")
    )
}

/// Reduces a JSON Schema (as schemars derives it) to the OpenAPI subset Gemini's function
/// declarations accept: local `$ref`s are inlined, `type: [T, "null"]` and
/// `anyOf: [S, {type: null}]` become `nullable`, `const` and `oneOf` become `enum` and `anyOf`,
/// and unknown keys and formats are dropped.
pub fn reduce_schema(schema: &Value) -> Value {
    let definitions = schema
        .get("$defs")
        .or_else(|| schema.get("definitions"))
        .cloned()
        .unwrap_or(Value::Null);
    reduce(schema, &definitions, 0)
}

fn reduce(schema: &Value, definitions: &Value, depth: usize) -> Value {
    let Some(object) = schema.as_object() else {
        return json!({});
    };
    // Recursive types cannot be inlined for ever; past this depth a node is left open.
    if depth > 16 {
        return json!({});
    }
    if let Some(target) = object.get("$ref").and_then(Value::as_str) {
        let name = target.rsplit('/').next().unwrap_or_default();
        let mut resolved = reduce(&definitions[name], definitions, depth + 1);
        // Siblings of `$ref` (a field's description) win over the definition's.
        if let (Some(resolved), Some(description)) =
            (resolved.as_object_mut(), object.get("description"))
        {
            resolved.insert("description".into(), description.clone());
        }
        return resolved;
    }
    let mut out = Map::new();
    let mut nullable = false;
    for (key, value) in object {
        match key.as_str() {
            "type" => match value {
                Value::Array(kinds) => {
                    nullable |= kinds.iter().any(|k| k == "null");
                    if let Some(kind) = kinds.iter().find(|k| *k != "null") {
                        out.insert("type".into(), kind.clone());
                    }
                }
                kind => {
                    out.insert("type".into(), kind.clone());
                }
            },
            "const" => {
                out.insert("enum".into(), json!([value]));
            }
            "anyOf" | "oneOf" => {
                nullable |= reduce_variants(value, definitions, depth, &mut out);
            }
            "properties" => {
                let properties: Map<String, Value> = value
                    .as_object()
                    .map(|props| {
                        props
                            .iter()
                            .map(|(name, s)| (name.clone(), reduce(s, definitions, depth + 1)))
                            .collect()
                    })
                    .unwrap_or_default();
                out.insert("properties".into(), Value::Object(properties));
            }
            "items" => {
                out.insert("items".into(), reduce(value, definitions, depth + 1));
            }
            "nullable" => nullable |= value.as_bool().unwrap_or(false),
            key if KEPT_KEYS.contains(&key) => {
                out.insert(key.into(), value.clone());
            }
            _ => {}
        }
    }
    keep_to_subset(&mut out);
    if nullable {
        out.insert("nullable".into(), Value::Bool(true));
    }
    Value::Object(out)
}

/// An `anyOf`/`oneOf` reduced into `out`: its one non-null variant merged in, or the variants
/// kept as `anyOf`. Whether a variant was `null`.
fn reduce_variants(
    value: &Value,
    definitions: &Value,
    depth: usize,
    out: &mut Map<String, Value>,
) -> bool {
    let variants: Vec<&Value> = value
        .as_array()
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let (nulls, others): (Vec<&Value>, Vec<&Value>) =
        variants.into_iter().partition(|v| v["type"] == "null");
    match others.as_slice() {
        [only] => {
            if let Value::Object(inner) = reduce(only, definitions, depth + 1) {
                for (k, v) in inner {
                    out.entry(k).or_insert(v);
                }
            }
        }
        many => {
            let reduced = many
                .iter()
                .map(|v| reduce(v, definitions, depth + 1))
                .collect();
            out.insert("anyOf".into(), Value::Array(reduced));
        }
    }
    !nulls.is_empty()
}

/// What Gemini's subset refuses, taken out of a reduced node: enums of anything but strings,
/// formats its types do not have, and `required` names of properties not declared.
fn keep_to_subset(out: &mut Map<String, Value>) {
    // Only string enums exist in Gemini's subset.
    if out
        .get("enum")
        .and_then(Value::as_array)
        .is_some_and(|values| !values.iter().all(Value::is_string))
    {
        out.remove("enum");
    }
    if let (Some(kind), Some(format)) = (
        out.get("type").and_then(Value::as_str),
        out.get("format").and_then(Value::as_str),
    ) {
        if !format_allowed(kind, format) {
            out.remove("format");
        }
    } else {
        out.remove("format");
    }
    // `required` may only name declared properties.
    if let Some(required) = out.get("required").and_then(Value::as_array) {
        let declared = out.get("properties").and_then(Value::as_object);
        let kept: Vec<Value> = required
            .iter()
            .filter(|name| {
                name.as_str()
                    .is_some_and(|n| declared.is_some_and(|d| d.contains_key(n)))
            })
            .cloned()
            .collect();
        if kept.is_empty() {
            out.remove("required");
        } else {
            out.insert("required".into(), Value::Array(kept));
        }
    }
}
