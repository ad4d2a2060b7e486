//! JSON Schema → GBNF, the grammar language of llama.cpp's sampler.
//!
//! Written here rather than taken from llama.cpp's `common` library: that library is most of
//! llama.cpp's build time (an HTTP client, argument parsing, chat parsers) and this conversion
//! is the only thing the runner needed from it.
//!
//! The grammar constrains the *shape* of the answer (types, properties, required keys, items,
//! enums, constants, string and array lengths). Value constraints a grammar would need a regex
//! or arithmetic engine for (`pattern`, `format`, `minimum`/`maximum`, `multipleOf`) are not in
//! the grammar; the validators still check the whole schema after generation, so such an
//! answer fails with a precise issue instead of being impossible to generate.
//!
//! A schema the grammar cannot follow exactly never fails the request: the part in question
//! becomes looser (a length bound above llama.cpp's repetition limit becomes unbounded, a
//! sub-schema nested too deep or not understood accepts any JSON value there) and
//! [`SchemaGrammar::loosened`] says what was loosened and where.

use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The largest repetition count llama.cpp's grammar parser takes (`MAX_REPETITION_THRESHOLD`
/// in its `llama-grammar.cpp`): a larger minimum is an error that rejects the whole grammar,
/// a larger maximum is silently dropped there.
pub const MAX_GRAMMAR_REPETITION: u64 = 2000;

/// Schema levels followed into the grammar; deeper sub-schemas accept any JSON value. Bounds
/// the converter's own recursion on a hostile schema, and the grammar's size.
pub const MAX_GRAMMAR_DEPTH: usize = 32;

/// A JSON Schema turned into a GBNF grammar, with what the grammar had to leave looser than
/// the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaGrammar {
    /// The grammar; its `root` rule accepts JSON text of the schema's shape.
    pub gbnf: String,
    /// One line per place the grammar accepts more than the schema (`root.code: maxLength
    /// 10000 is above …`). Empty when the grammar follows the whole shape. Keywords the
    /// grammar never expresses (`pattern`, `minimum`, …) are listed too: the validators check
    /// them after generation.
    pub loosened: Vec<String>,
}

/// Why a part of a JSON Schema cannot be turned into a grammar (the text of a
/// [`SchemaGrammar::loosened`] line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaGrammarError {
    /// A `$ref` that does not point into this schema's `$defs` or `definitions`.
    #[error("`$ref` {0:?} does not name an entry of this schema's `$defs` or `definitions`")]
    UnresolvedRef(String),
    /// A keyword or value the conversion does not support (the message says which).
    #[error("{0}")]
    Unsupported(String),
}

/// The rules every grammar may use. Whitespace is bounded so a model cannot spend its token
/// budget on blank lines inside a JSON value.
const BASE_RULES: &[(&str, &str)] = &[
    ("space", r#"| " " | "\n" [ \t]{0,20}"#),
    ("boolean", r#"("true" | "false") space"#),
    ("null", r#""null" space"#),
    ("integral-part", r#"[0] | [1-9] [0-9]{0,15}"#),
    ("decimal-part", r#"[0-9]{1,16}"#),
    ("integer", r#"("-"? integral-part) space"#),
    (
        "number",
        r#"("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)? space"#,
    ),
    (
        "char",
        r#"[^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})"#,
    ),
    ("string", r#""\"" char* "\"" space"#),
    (
        "value",
        r#"object | array | string | number | boolean | null"#,
    ),
    (
        "object",
        r#""{" space ( string ":" space value ("," space string ":" space value)* )? "}" space"#,
    ),
    (
        "array",
        r#""[" space ( value ("," space value)* )? "]" space"#,
    ),
];

/// Turns a JSON Schema into a GBNF grammar whose `root` rule accepts JSON text of that shape.
///
/// Supported: `type` (one or a list), `properties`, `required`, `additionalProperties`,
/// `items`, `prefixItems`, `minItems`/`maxItems`, `minLength`/`maxLength`, `enum`, `const`,
/// `anyOf`/`oneOf`, `allOf` of object schemas, `$ref` into `$defs`/`definitions` (recursive
/// ones too), `true` and `{}`. Properties come in key order, required ones first.
///
/// Never fails: what the grammar cannot follow (a schema no value satisfies, a `$ref` outside
/// the schema, an unknown type, nesting deeper than [`MAX_GRAMMAR_DEPTH`], a length or count
/// above [`MAX_GRAMMAR_REPETITION`]) is loosened and listed in [`SchemaGrammar::loosened`].
pub fn json_schema_to_gbnf(schema: &Value) -> SchemaGrammar {
    let mut builder = Builder {
        root: schema,
        rules: BTreeMap::new(),
        refs: BTreeMap::new(),
        depth: 0,
        loosened: Vec::new(),
    };
    let body = builder.visit(schema, "root");
    builder.rules.insert("root".into(), body);
    let mut out = String::new();
    for (name, body) in &builder.rules {
        let _ = writeln!(out, "{name} ::= {body}");
    }
    // All base rules, used or not: llama.cpp accepts unused rules.
    for (name, body) in BASE_RULES {
        let _ = writeln!(out, "{name} ::= {body}");
    }
    SchemaGrammar {
        gbnf: out,
        loosened: builder.loosened,
    }
}

/// Keywords a grammar cannot express: they need a regex engine, arithmetic or a look at the
/// whole value. The validators check them after generation.
const NOT_IN_GRAMMAR: &[&str] = &[
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "uniqueItems",
    "not",
    "if",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "contains",
    "dependentRequired",
    "dependentSchemas",
];

struct Builder<'s> {
    root: &'s Value,
    /// Named rules made for this schema, by name.
    rules: BTreeMap<String, String>,
    /// `$ref` target → its rule name (made before the target is visited, so recursion ends).
    refs: BTreeMap<String, String>,
    /// Schema levels entered on the way to the current one.
    depth: usize,
    /// What the grammar accepts beyond the schema, one line per place.
    loosened: Vec<String>,
}

impl<'s> Builder<'s> {
    /// The GBNF expression for `schema`; `name` is a readable stem for the rules it adds.
    /// What cannot be followed exactly accepts any JSON value, recorded in `loosened`.
    fn visit(&mut self, schema: &Value, name: &str) -> String {
        if self.depth >= MAX_GRAMMAR_DEPTH {
            self.loosened.push(format!(
                "`{name}` is nested deeper than {MAX_GRAMMAR_DEPTH} levels; any JSON value is accepted there"
            ));
            return "value".into();
        }
        self.depth += 1;
        let body = self.visit_exact(schema, name);
        self.depth -= 1;
        body.unwrap_or_else(|e| {
            self.loosened
                .push(format!("{e}; any JSON value is accepted there"));
            "value".into()
        })
    }

    fn visit_exact(&mut self, schema: &Value, name: &str) -> Result<String, SchemaGrammarError> {
        let schema = match schema {
            Value::Bool(true) => return Ok("value".into()),
            Value::Bool(false) => {
                return Err(SchemaGrammarError::Unsupported(format!(
                    "`{name}` is `false`: no JSON value matches it"
                )))
            }
            Value::Object(map) => map,
            other => {
                return Err(SchemaGrammarError::Unsupported(format!(
                    "`{name}` is {other}, not a schema (an object or a boolean)"
                )))
            }
        };
        for keyword in NOT_IN_GRAMMAR.iter().filter(|k| schema.contains_key(**k)) {
            self.loosened.push(format!(
                "`{name}.{keyword}` is not in the grammar; the validators check it"
            ));
        }
        if let Some(reference) = schema.get("$ref") {
            return self.reference(reference);
        }
        if let Some(value) = schema.get("const") {
            return Ok(format!("{} space", literal(value)));
        }
        if let Some(values) = schema.get("enum") {
            let Some(values) = values.as_array().filter(|v| !v.is_empty()) else {
                return Err(SchemaGrammarError::Unsupported(format!(
                    "`{name}.enum` must be a non-empty list"
                )));
            };
            let choices: Vec<String> = values.iter().map(literal).collect();
            return Ok(format!("({}) space", choices.join(" | ")));
        }
        for keyword in ["anyOf", "oneOf"] {
            if let Some(options) = schema.get(keyword) {
                return self.alternatives(options, &format!("{name}-{keyword}"));
            }
        }
        if let Some(parts) = schema.get("allOf") {
            let merged = merge_all_of(parts, name)?;
            return Ok(self.visit(&merged, name));
        }
        match schema.get("type") {
            None => self.untyped(schema, name),
            Some(Value::String(kind)) => self.typed(kind, schema, name),
            Some(Value::Array(kinds)) => {
                let mut choices = Vec::with_capacity(kinds.len());
                for kind in kinds {
                    let Some(kind) = kind.as_str() else {
                        return Err(SchemaGrammarError::Unsupported(format!(
                            "`{name}.type` lists {kind}, not a type name"
                        )));
                    };
                    let rule =
                        self.add(&format!("{name}-{kind}"), |b| b.typed(kind, schema, name))?;
                    choices.push(rule);
                }
                Ok(format!("({})", choices.join(" | ")))
            }
            Some(other) => Err(SchemaGrammarError::Unsupported(format!(
                "`{name}.type` is {other}, not a type name or a list of them"
            ))),
        }
    }

    /// A schema without `type`: what its keywords imply, else any value.
    fn untyped(
        &mut self,
        schema: &Map<String, Value>,
        name: &str,
    ) -> Result<String, SchemaGrammarError> {
        if schema.contains_key("properties") || schema.contains_key("additionalProperties") {
            self.typed("object", schema, name)
        } else if schema.contains_key("items") || schema.contains_key("prefixItems") {
            self.typed("array", schema, name)
        } else {
            Ok("value".into())
        }
    }

    fn typed(
        &mut self,
        kind: &str,
        schema: &Map<String, Value>,
        name: &str,
    ) -> Result<String, SchemaGrammarError> {
        match kind {
            "object" => self.object(schema, name),
            "array" => self.array(schema, name),
            "string" => self.string(schema, name),
            "integer" => Ok("integer".into()),
            "number" => Ok("number".into()),
            "boolean" => Ok("boolean".into()),
            "null" => Ok("null".into()),
            other => Err(SchemaGrammarError::Unsupported(format!(
                "`{name}.type` {other:?} is not a JSON Schema type"
            ))),
        }
    }

    fn alternatives(&mut self, options: &Value, name: &str) -> Result<String, SchemaGrammarError> {
        let Some(options) = options.as_array().filter(|o| !o.is_empty()) else {
            return Err(SchemaGrammarError::Unsupported(format!(
                "`{name}` must be a non-empty list of schemas"
            )));
        };
        let mut choices = Vec::with_capacity(options.len());
        for (i, option) in options.iter().enumerate() {
            let stem = format!("{name}-{i}");
            choices.push(self.add(&stem, |b| Ok(b.visit(option, &stem)))?);
        }
        Ok(format!("({})", choices.join(" | ")))
    }

    fn reference(&mut self, reference: &Value) -> Result<String, SchemaGrammarError> {
        let Some(target) = reference.as_str() else {
            return Err(SchemaGrammarError::UnresolvedRef(reference.to_string()));
        };
        if let Some(rule) = self.refs.get(target) {
            return Ok(rule.clone());
        }
        let resolved = ["#/$defs/", "#/definitions/"].iter().find_map(|prefix| {
            let key = target.strip_prefix(prefix)?;
            self.root.get(&prefix[2..prefix.len() - 1])?.get(key)
        });
        let Some(resolved) = resolved else {
            return Err(SchemaGrammarError::UnresolvedRef(target.into()));
        };
        let rule = self.unique(&format!(
            "ref-{}",
            target.rsplit('/').next().unwrap_or("def")
        ));
        self.refs.insert(target.into(), rule.clone());
        // Reserved before the visit, so a recursive reference finds the name.
        self.rules.insert(rule.clone(), String::new());
        let body = self.visit(resolved, &rule);
        self.rules.insert(rule.clone(), body);
        Ok(rule)
    }

    fn object(
        &mut self,
        schema: &Map<String, Value>,
        name: &str,
    ) -> Result<String, SchemaGrammarError> {
        let properties = match schema.get("properties") {
            None => None,
            Some(Value::Object(p)) => Some(p),
            Some(other) => {
                return Err(SchemaGrammarError::Unsupported(format!(
                    "`{name}.properties` is {other}, not an object"
                )))
            }
        };
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let extra = match schema.get("additionalProperties") {
            None | Some(Value::Bool(false)) if properties.is_some() => None,
            None | Some(Value::Bool(true)) => Some("value".to_string()),
            Some(Value::Bool(false)) => return Ok(r#""{" space "}" space"#.into()),
            Some(extra) => {
                let stem = format!("{name}-additional");
                Some(self.add(&stem, |b| Ok(b.visit(extra, &stem)))?)
            }
        };
        let Some(properties) = properties else {
            // Only additional properties: any keys, each value of that schema.
            let value = extra.unwrap_or_else(|| "value".into());
            if value == "value" {
                return Ok("object".into());
            }
            let pair = format!("string \":\" space {value}");
            return Ok(format!(
                r#""{{" space ( {pair} ("," space {pair})* )? "}}" space"#
            ));
        };
        let mut pairs_required = Vec::new();
        let mut pairs_optional = Vec::new();
        for key in required.iter().copied().chain(
            properties
                .keys()
                .map(String::as_str)
                .filter(|k| !required.contains(k)),
        ) {
            let Some(property) = properties.get(key) else {
                // Required but undeclared: any value under that key.
                pairs_required.push(format!(
                    "{} space \":\" space value",
                    literal(&Value::from(key))
                ));
                continue;
            };
            let stem = format!("{name}-{}", rule_safe(key));
            let value = self.add(&stem, |b| Ok(b.visit(property, &stem)))?;
            let pair = format!("{} space \":\" space {value}", literal(&Value::from(key)));
            if required.contains(&key) {
                pairs_required.push(pair);
            } else {
                pairs_optional.push(pair);
            }
        }
        if let Some(extra) = &extra {
            pairs_optional.push(format!("string \":\" space {extra}"));
        }
        let repeat_last = extra.is_some();
        let body = if pairs_required.is_empty() {
            self.optional_only(&pairs_optional, repeat_last, name)
        } else {
            let mut body = pairs_required.join(r#" "," space "#);
            for (i, pair) in pairs_optional.iter().enumerate() {
                let star = if repeat_last && i + 1 == pairs_optional.len() {
                    "*"
                } else {
                    "?"
                };
                let _ = write!(body, r#" ("," space {pair}){star}"#);
            }
            body
        };
        Ok(format!(r#""{{" space {body} "}}" space"#))
    }

    /// Optional pairs in order, any subset, commas only between them: rule `from-i` starts
    /// at pair `i` or later.
    fn optional_only(&mut self, pairs: &[String], repeat_last: bool, name: &str) -> String {
        if pairs.is_empty() {
            return String::new();
        }
        let stem = self.unique(&format!("{name}-rest"));
        let mut next_rest = String::new();
        let mut next_start = String::new();
        for (i, pair) in pairs.iter().enumerate().rev() {
            let rest = format!("{stem}-{i}");
            let start = format!("{stem}-start-{i}");
            let (tail, begin) = if i + 1 == pairs.len() {
                // The last pair: once, or (for additional properties) any number of times.
                let mark = if repeat_last { "*" } else { "?" };
                let begin = if repeat_last {
                    format!("{pair} {rest}")
                } else {
                    pair.clone()
                };
                (format!(r#"("," space {pair}){mark}"#), begin)
            } else {
                (
                    format!(r#"("," space {pair})? {next_rest}"#),
                    format!("{pair} {next_rest} | {next_start}"),
                )
            };
            self.rules.insert(rest.clone(), tail);
            self.rules.insert(start.clone(), begin);
            next_rest = rest;
            next_start = start;
        }
        format!("({next_start})?")
    }

    fn array(
        &mut self,
        schema: &Map<String, Value>,
        name: &str,
    ) -> Result<String, SchemaGrammarError> {
        if let Some(prefix) = schema.get("prefixItems") {
            let Some(prefix) = prefix.as_array() else {
                return Err(SchemaGrammarError::Unsupported(format!(
                    "`{name}.prefixItems` must be a list of schemas"
                )));
            };
            let mut items = Vec::with_capacity(prefix.len());
            for (i, item) in prefix.iter().enumerate() {
                let stem = format!("{name}-{i}");
                items.push(self.add(&stem, |b| Ok(b.visit(item, &stem)))?);
            }
            return Ok(format!(
                r#""[" space {} "]" space"#,
                items.join(r#" "," space "#)
            ));
        }
        let item = match schema.get("items") {
            None => "value".to_string(),
            Some(item) => {
                let stem = format!("{name}-item");
                self.add(&stem, |b| Ok(b.visit(item, &stem)))?
            }
        };
        let (min, max) = self.bounds(schema, ("minItems", "maxItems"), name)?;
        let inner = match (min, max) {
            (_, Some(0)) => String::new(),
            (0, max) => format!(
                r#"( {item} ("," space {item}){} )?"#,
                repeat(0, max.map(|m| m - 1))
            ),
            (min, max) => format!(
                r#"{item} ("," space {item}){}"#,
                repeat(min - 1, max.map(|m| m - 1))
            ),
        };
        Ok(format!(r#""[" space {inner} "]" space"#))
    }

    fn string(
        &mut self,
        schema: &Map<String, Value>,
        name: &str,
    ) -> Result<String, SchemaGrammarError> {
        match self.bounds(schema, ("minLength", "maxLength"), name)? {
            (0, None) => Ok("string".into()),
            (min, max) => Ok(format!(r#""\"" char{} "\"" space"#, repeat(min, max))),
        }
    }

    /// A length or count range (`keys`: its minimum and maximum keyword) within what
    /// llama.cpp repeats: a larger maximum becomes no maximum, a larger minimum the largest
    /// one it takes, each recorded in `loosened`.
    fn bounds(
        &mut self,
        schema: &Map<String, Value>,
        (min_key, max_key): (&str, &str),
        name: &str,
    ) -> Result<(u64, Option<u64>), SchemaGrammarError> {
        let min = count(schema, min_key, name)?.unwrap_or(0);
        let mut max = count(schema, max_key, name)?;
        if max.is_some_and(|max| max < min) {
            return Err(SchemaGrammarError::Unsupported(format!(
                "`{name}`: {max_key} is below {min_key}, nothing matches"
            )));
        }
        if let Some(above) = max.filter(|m| *m > MAX_GRAMMAR_REPETITION) {
            self.loosened.push(format!(
                "`{name}.{max_key}` {above} is above the {MAX_GRAMMAR_REPETITION} repetitions llama.cpp's grammar takes; the grammar leaves it unbounded"
            ));
            max = None;
        }
        if min > MAX_GRAMMAR_REPETITION {
            self.loosened.push(format!(
                "`{name}.{min_key}` {min} is above the {MAX_GRAMMAR_REPETITION} repetitions llama.cpp's grammar takes; the grammar asks for {MAX_GRAMMAR_REPETITION}"
            ));
            return Ok((MAX_GRAMMAR_REPETITION, max));
        }
        Ok((min, max))
    }

    /// Adds a named rule for `body` unless it is a single rule name already; returns the name.
    fn add(
        &mut self,
        stem: &str,
        body: impl FnOnce(&mut Self) -> Result<String, SchemaGrammarError>,
    ) -> Result<String, SchemaGrammarError> {
        let body = body(self)?;
        if is_rule_name(&body) {
            return Ok(body);
        }
        let name = self.unique(stem);
        self.rules.insert(name.clone(), body);
        Ok(name)
    }

    /// `stem`, or `stem-N` when taken, as a GBNF rule name.
    fn unique(&self, stem: &str) -> String {
        let stem = rule_safe(stem);
        let taken = |n: &str| self.rules.contains_key(n) || BASE_RULES.iter().any(|(b, _)| *b == n);
        if !taken(&stem) {
            return stem;
        }
        (2..)
            .map(|i| format!("{stem}-{i}"))
            .find(|n| !taken(n))
            .unwrap_or(stem)
    }
}

/// A non-negative integer keyword, if present.
fn count(
    schema: &Map<String, Value>,
    key: &str,
    name: &str,
) -> Result<Option<u64>, SchemaGrammarError> {
    match schema.get(key) {
        None => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            SchemaGrammarError::Unsupported(format!(
                "`{name}.{key}` is {v}, not a non-negative integer"
            ))
        }),
    }
}

/// GBNF repetition `{min,max}` (`{min,}` without a maximum).
fn repeat(min: u64, max: Option<u64>) -> String {
    match max {
        Some(max) => format!("{{{min},{max}}}"),
        None => format!("{{{min},}}"),
    }
}

/// `allOf` of object schemas as one object schema: properties and `required` united, the
/// strictest `additionalProperties` kept.
fn merge_all_of(parts: &Value, name: &str) -> Result<Value, SchemaGrammarError> {
    let Some(parts) = parts.as_array().filter(|p| !p.is_empty()) else {
        return Err(SchemaGrammarError::Unsupported(format!(
            "`{name}.allOf` must be a non-empty list of schemas"
        )));
    };
    if let [only] = parts.as_slice() {
        return Ok(only.clone());
    }
    let mut properties = Map::new();
    let mut required: Vec<Value> = Vec::new();
    let mut closed = false;
    for part in parts {
        let is_object = part.get("properties").is_some()
            || part.get("type").and_then(Value::as_str) == Some("object");
        if !is_object {
            return Err(SchemaGrammarError::Unsupported(format!(
                "`{name}.allOf` combines schemas other than objects; only objects can be merged into a grammar"
            )));
        }
        if let Some(p) = part.get("properties").and_then(Value::as_object) {
            properties.extend(p.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        for r in part
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !required.contains(r) {
                required.push(r.clone());
            }
        }
        closed |= part.get("additionalProperties") == Some(&Value::Bool(false));
    }
    let mut merged = Map::new();
    merged.insert("type".into(), "object".into());
    merged.insert("properties".into(), Value::Object(properties));
    merged.insert("required".into(), Value::Array(required));
    if closed {
        merged.insert("additionalProperties".into(), false.into());
    }
    Ok(Value::Object(merged))
}

/// A GBNF grammar whose `root` accepts exactly one of `choices` (as they are, not as JSON),
/// the answer of a `one_of` contract. No choices: the grammar accepts nothing but the empty
/// answer, which the validator then refuses.
pub fn choices_to_gbnf(choices: &[String]) -> String {
    let alternatives: Vec<String> = choices.iter().map(|c| gbnf_string(c)).collect();
    if alternatives.is_empty() {
        return "root ::= \"\"\n".into();
    }
    format!("root ::= {}\n", alternatives.join(" | "))
}

/// A GBNF string literal matching exactly the JSON text of `value`.
fn literal(value: &Value) -> String {
    gbnf_string(&value.to_string())
}

/// A GBNF string literal matching exactly `text`.
fn gbnf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A rule name from any text: letters, digits and `-` only.
fn rule_safe(text: &str) -> String {
    let mut name: String = text
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    if name.is_empty() {
        name.push('r');
    }
    name
}

fn is_rule_name(body: &str) -> bool {
    !body.is_empty() && body.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

#[cfg(test)]
mod gbnf_matcher;
#[cfg(test)]
mod tests;
