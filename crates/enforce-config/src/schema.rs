//! The JSON Schema of `enforce.yaml`, generated from the configuration types with
//! [`schemars`], for editors (completion, hover docs, checks as you type) and other tools.
//!
//! [`config_schema`] describes [`Config`]: the four sections this crate reads. A program with
//! more sections derives [`schemars::JsonSchema`] for its own top-level struct, marks its
//! `validators` field with `#[schemars(schema_with = "enforce_config::schema::validators")]`,
//! and generates with [`settings`] (the `enforce` binary does this; `enforce config schema`
//! prints the result).
//!
//! Each built-in validator type has its own schema: its options (derived from the very structs
//! its `from_config` parses, so unknown keys and wrong types are errors in both) plus the keys
//! every spec accepts (`type`, `description`, `input`, `when`, `unavailable_status`). A spec
//! whose `type` is not built in (a plugin's) may hold any keys. A key of `validators:` named
//! like a built-in type without a `type` of its own uses that type, as the
//! [`Registry`](crate::Registry) does.
//!
//! ```
//! let schema = enforce_config::schema::config_schema();
//! let validators = &schema.as_value()["properties"]["validators"];
//! assert!(validators["properties"]["pattern"].is_object());
//! ```
//!
//! What no schema can express is left to the parser: cross references (a profile naming a
//! validator that does not exist), regex syntax, files that must exist, and whether a plugin
//! type is registered at all.

use crate::config::Config;
use schemars::generate::SchemaSettings;
use schemars::transform::RecursiveTransform;
use schemars::{json_schema, Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

/// Builds the JSON Schema of one validator type's options: an inline object schema.
pub type OptionsSchema = fn(&mut SchemaGenerator) -> Schema;

/// The settings the schemas of `enforce.yaml` are generated with: JSON Schema draft 7, the
/// draft editors' YAML and JSON support understands best, with descriptions made for hovers
/// (the Rust doc comments they come from lose their code examples and links) and without
/// defaults that say nothing (`null`, or an object of nulls).
pub fn settings() -> SchemaSettings {
    SchemaSettings::draft07().with_transform(RecursiveTransform(tidy))
}

/// See [`settings`].
fn tidy(schema: &mut Schema) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let says_nothing = |value: &Value| match value {
        Value::Null => true,
        Value::Object(map) => !map.is_empty() && map.values().all(Value::is_null),
        _ => false,
    };
    if object.get("default").is_some_and(says_nothing) {
        object.remove("default");
    }
    accept_env_references(object);
    for key in ["title", "description"] {
        if let Some(Value::String(text)) = object.get_mut(key) {
            *text = hover_text(text);
        }
    }
}

/// A `${VAR}` / `${VAR:-default}` reference, which [`crate::env`] expands before parsing.
const ENV_REFERENCE_PATTERN: &str = r"^\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}$";

/// A number or boolean may be written as one `${VAR}` reference (expanded before parsing), so
/// editors do not flag `timeout_ms: ${TIMEOUT_MS:-2000}`: `string` joins the field's types, and
/// `pattern` (which JSON Schema applies to strings only) admits references alone. Any other
/// text in such a field is still an error; number bounds still hold for numbers. A string
/// field with a pattern also admits a reference.
fn accept_env_references(object: &mut Map<String, Value>) {
    let scalar = |t: &Value| matches!(t.as_str(), Some("integer" | "number" | "boolean"));
    // A string with a pattern (`url: ^http://`) may be a reference too.
    let has_string = match object.get("type") {
        Some(Value::Array(types)) => types.iter().any(|t| t == "string"),
        Some(t) => t == "string",
        None => false,
    };
    if has_string {
        if let Some(Value::String(pattern)) = object.get_mut("pattern") {
            if !pattern.contains(ENV_REFERENCE_PATTERN) {
                *pattern = format!("(?:{pattern})|(?:{ENV_REFERENCE_PATTERN})");
            }
        }
        return;
    }
    let types = match object.get("type") {
        Some(Value::Array(types)) if types.iter().any(scalar) => types.clone(),
        Some(t) if scalar(t) => vec![t.clone()],
        _ => return,
    };
    if types.iter().any(|t| t == "string") || object.contains_key("pattern") {
        return;
    }
    let mut types = types;
    types.push(json!("string"));
    object.insert("type".into(), Value::Array(types));
    object.insert("pattern".into(), json!(ENV_REFERENCE_PATTERN));
}

/// A doc comment as plain prose: up to its first code block, paragraphs kept, lines within a
/// paragraph joined, intra-doc links (`` [`x`](path) ``) reduced to their text.
fn hover_text(doc: &str) -> String {
    let prose = doc.split("```").next().unwrap_or_default();
    let paragraphs: Vec<String> = prose
        .split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty())
        .collect();
    let mut text = paragraphs.join("\n\n");
    // `[label](target)` -> `label`
    while let Some(start) = text.find("](") {
        let Some(open) = text[..start].rfind('[') else {
            break;
        };
        let Some(close) = text[start..].find(')') else {
            break;
        };
        let label = text[open + 1..start].to_string();
        text.replace_range(open..start + close + 1, &label);
    }
    // [`x`] -> `x`
    text.replace("[`", "`").replace("`]", "`")
}

/// The schema of [`Config`] (the four sections this crate reads), as a root schema.
pub fn config_schema() -> Schema {
    settings().into_generator().into_root_schema_for::<Config>()
}

/// Name of the definition of a spec of the built-in type `kind` (`step_marker` →
/// `StepMarkerSpec`).
fn spec_definition(kind: &str) -> String {
    let mut name = String::new();
    for part in kind.split(['_', '-', '.']) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            name.extend(first.to_uppercase());
            name.push_str(chars.as_str());
        }
    }
    name.push_str("Spec");
    name
}

/// Name of the definition of a spec whose type is only known at run time.
const ANY_SPEC: &str = "ValidatorSpec";

/// A `$ref` to the definition `name` in `generator`'s definitions.
fn reference(generator: &SchemaGenerator, name: &str) -> Value {
    let path = generator
        .settings()
        .definitions_path
        .trim_start_matches('#');
    let path = path.trim_end_matches('/');
    json!({ "$ref": format!("#{path}/{name}") })
}

/// The properties the registry itself reads from every spec.
fn reserved_properties(generator: &mut SchemaGenerator, kind: Option<&str>) -> Map<String, Value> {
    let kinds: Vec<&str> = crate::builtin_options().iter().map(|b| b.0).collect();
    let kind_schema = match kind {
        Some(kind) => json!({
            "description": "The validator type (default: the validator's name).",
            "const": kind,
        }),
        None => json!({
            "description": "The validator type (default: the validator's name): a built-in \
                            type or one a plugin registers.",
            "type": "string",
            "anyOf": [
                { "enum": kinds },
                { "pattern": "^[A-Za-z0-9_.-]+$" },
            ],
        }),
    };
    let mut properties = Map::new();
    properties.insert("type".into(), kind_schema);
    properties.insert(
        "description".into(),
        json!({ "description": "What the validator is for (shown by tools).", "type": "string" }),
    );
    let mut input = enforce_validators::Scope::input_schema(generator).to_value();
    describe(
        &mut input,
        "What the validator checks: `response` (the default), `{json: /pointer}` (a field of \
         the response's JSON) or `{context: key}` (a request-context value).",
    );
    properties.insert("input".into(), input);
    let mut when = enforce_validators::Scope::when_schema(generator).to_value();
    describe(
        &mut when,
        "Apply the validator only when this condition holds (a list: when all hold).",
    );
    properties.insert("when".into(), when);
    properties.insert(
        "unavailable_status".into(),
        json!({
            "description": "The literal status the proxy reports (`x-enforce-validation-status`, \
                            `validation_status`) when this validator gives no verdict (failed \
                            open or closed, switched off, breaker open), e.g. \
                            `PARSER_UNAVAILABLE`; upper-case letters, digits and `_`. Default: \
                            the validator's name upper-cased with `_UNAVAILABLE`.",
            "type": "string",
            "pattern": "^[A-Z0-9_]+$",
        }),
    );
    properties
}

/// Sets `description` on a schema; a bare `$ref` is wrapped so draft 7 does not ignore it.
fn describe(schema: &mut Value, description: &str) {
    if let Some(object) = schema.as_object_mut() {
        if object.contains_key("$ref") {
            *schema = json!({ "allOf": [schema.clone()], "description": description });
        } else {
            object.insert("description".into(), json!(description));
        }
    }
}

/// The schema of a spec of the built-in type `kind`: its options plus the reserved keys.
fn builtin_spec(generator: &mut SchemaGenerator, kind: &str, options: OptionsSchema) -> Value {
    let mut schema = options(generator).to_value();
    let reserved = reserved_properties(generator, Some(kind));
    let object = schema
        .as_object_mut()
        .expect("validator options are described by an object schema");
    let properties = object
        .entry("properties")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .expect("`properties` is an object");
    for (key, value) in reserved {
        properties.insert(key, value);
    }
    object.insert("title".into(), json!(format!("A `{kind}` validator")));
    object.remove("description");
    schema
}

/// The schema of the `validators:` section: name → spec.
///
/// Use it on the `validators` field of a configuration struct with
/// `#[schemars(schema_with = "enforce_config::schema::validators")]`.
pub fn validators(generator: &mut SchemaGenerator) -> Schema {
    let builtins = crate::builtin_options();
    let mut dispatch = Vec::new();
    for &(kind, options, _) in &builtins {
        let name = spec_definition(kind);
        if !generator.definitions().contains_key(&name) {
            let spec = builtin_spec(generator, kind, options);
            generator.definitions_mut().insert(name.clone(), spec);
        }
        dispatch.push(json!({
            "if": {
                "type": "object",
                "required": ["type"],
                "properties": { "type": { "const": kind } },
            },
            "then": reference(generator, &name),
        }));
    }
    if !generator.definitions().contains_key(ANY_SPEC) {
        let properties = reserved_properties(generator, None);
        let any = json!({
            "title": "A validator",
            "description": "A validator's options: `type` picks the validator type (default: \
                            the validator's name); the other keys are that type's options. \
                            Options of a plugin's type are not checked here.",
            "type": ["object", "null"],
            "properties": properties,
            "allOf": dispatch,
        });
        generator.definitions_mut().insert(ANY_SPEC.into(), any);
    }
    let any = reference(generator, ANY_SPEC);
    let mut named = Map::new();
    for &(kind, _, bare) in &builtins {
        let spec = reference(generator, &spec_definition(kind));
        let untyped = if bare {
            json!({ "anyOf": [{ "type": "null" }, spec] })
        } else {
            spec
        };
        named.insert(
            kind.to_string(),
            json!({
                "if": { "type": "object", "required": ["type"] },
                "then": any,
                "else": untyped,
            }),
        );
    }
    json_schema!({
        "description": "Named, configured validators: name → options. `type` defaults to the \
                        name, so a validator named like a built-in type needs no `type`.",
        "type": "object",
        "properties": named,
        "additionalProperties": any,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BuildEnv, Registry};

    #[test]
    fn every_builtin_type_has_an_options_schema_and_no_other_does() {
        let registry = Registry::builtin();
        let kinds: Vec<&str> = registry.kinds().collect();
        let mut described: Vec<&str> = crate::builtin_options().iter().map(|b| b.0).collect();
        described.sort_unstable();
        assert_eq!(described, kinds);
    }

    #[test]
    fn bare_flags_match_what_the_registry_accepts_without_options() {
        for (kind, _, bare) in crate::builtin_options() {
            let built = Registry::builtin().build(kind, &Value::Null, &BuildEnv::default());
            assert_eq!(built.is_ok(), bare, "{kind}: {:?}", built.err());
        }
    }

    #[test]
    fn hover_texts_drop_code_links_and_line_breaks() {
        let doc = "Which runner to build;\ntagged by `type`. See [`Registry`](crate::Registry).\n\nMore.\n\n```\nlet x = 1;\n```";
        assert_eq!(
            hover_text(doc),
            "Which runner to build; tagged by `type`. See `Registry`.\n\nMore."
        );
    }

    #[test]
    fn definition_names_are_camel_case() {
        assert_eq!(spec_definition("step_marker"), "StepMarkerSpec");
        assert_eq!(spec_definition("json"), "JsonSpec");
    }
}
