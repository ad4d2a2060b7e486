//! The gRPC target of the `external` validator: calls a unary method of a gRPC checker, known
//! only from its `.proto` file (compiled at start-up by protox) or a compiled descriptor set,
//! with no generated code: the request and the response are prost-reflect `DynamicMessage`s
//! and tonic carries them through a codec that encodes and decodes by descriptor.
//!
//! ```yaml
//! avap_parser:
//!   type: external
//!   grpc:
//!     url: http://127.0.0.1:50051          # https:// = TLS (ca_file: a private CA)
//!     proto: protos/parser.proto          # or descriptor_set: parser.pb
//!     method: avap.Parser/Validate
//!     request: { code_field: code, fields: { language: avap } }
//!     response: { valid_field: valid, trace_field: trace }
//!   blocks: avap
//! ```
//!
//! `request.context_field: NAME` also sends the request context as JSON in the string field
//! `NAME`, so the checker sees the case it checks.
//!
//! The configuration types are always compiled (so the schema of enforce.yaml does not depend
//! on the build); the client needs the cargo feature `grpc`.

// Without the feature the options are parsed (a `grpc:` key is still no unknown key) but not read.
#![cfg_attr(not(feature = "grpc"), allow(dead_code))]

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The `grpc:` options of the `external` validator.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GrpcConfig {
    /// The server: `http://host:port` (plain HTTP/2) or `https://host:port` (TLS);
    /// `grpc://` and `grpcs://` are read as `http://` and `https://`.
    #[cfg_attr(feature = "config-schema", schemars(extend("pattern" = "^(https?|grpcs?)://")))]
    pub(crate) url: String,
    /// The `.proto` file declaring the method, relative to the configuration file; compiled at
    /// start-up (imports are looked up beside it and in `include`).
    pub(crate) proto: Option<PathBuf>,
    /// A compiled descriptor set (`protoc --include_imports -o parser.pb ...`) instead of
    /// `proto`, relative to the configuration file.
    pub(crate) descriptor_set: Option<PathBuf>,
    /// More directories the `.proto` file's imports are looked up in.
    #[serde(default)]
    pub(crate) include: Vec<PathBuf>,
    /// The unary method to call: `package.Service/Method`.
    pub(crate) method: String,
    /// How the request message is filled.
    pub(crate) request: GrpcRequestConfig,
    /// How the response message is read.
    pub(crate) response: GrpcResponseConfig,
}

/// How the request message of the `grpc:` target is filled.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GrpcRequestConfig {
    /// The `string` field that receives the checked text.
    pub(crate) code_field: String,
    /// Fixed values of other fields (protobuf JSON mapping: enums by name, ...).
    #[serde(default)]
    pub(crate) fields: BTreeMap<String, serde_json::Value>,
    /// A `string` field that receives the request context as JSON, so the checker sees the
    /// case it checks (an eval case's tests, say).
    pub(crate) context_field: Option<String>,
}

/// How the response message of the `grpc:` target is read.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GrpcResponseConfig {
    /// The field holding the verdict: a `bool` (true = passed), or an enum or `string` compared
    /// with `valid_value`.
    pub(crate) valid_field: String,
    /// The value of `valid_field` that means passed (an enum value's name or number, or a
    /// string); required unless `valid_field` is a `bool`.
    pub(crate) valid_value: Option<ValidValue>,
    /// The `string` (or `repeated string`) field holding the checker's trace, e.g.
    /// `Line 3: unknown command`; its lines become issues with lines.
    pub(crate) trace_field: Option<String>,
}

/// The value of `valid_field` that means passed.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum ValidValue {
    /// For a `bool` field.
    Bool(bool),
    /// An enum value's number.
    Number(i64),
    /// An enum value's name or a string.
    Text(String),
}

#[cfg(feature = "grpc")]
pub use client::GrpcTarget;

#[cfg(feature = "grpc")]
mod client {
    use super::{GrpcConfig, ValidValue};
    use enforce_core::Unavailable;
    use enforce_validators::{BuildError, FactoryInput};
    use prost::Message;
    use prost_reflect::{
        DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, Value,
    };
    use std::path::PathBuf;
    use std::sync::{Mutex, PoisonError};
    use std::time::Duration;
    use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
    use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
    use tonic::Status;

    /// What `valid_field` must hold for the input to pass.
    #[derive(Debug, Clone, PartialEq)]
    enum Expected {
        Bool(bool),
        Enum(i32),
        Text(String),
    }

    /// A unary gRPC method called with dynamic messages. See the [module docs](super).
    #[derive(Debug)]
    pub struct GrpcTarget {
        url: String,
        endpoint: Endpoint,
        /// Made on the first call: a tonic channel spawns its worker on the running runtime,
        /// and configurations are built before (or without) one. Made anew when that worker
        /// is gone (its runtime ended: a CLI may run one runtime per input).
        channel: Mutex<Option<Channel>>,
        path: http::uri::PathAndQuery,
        response: MessageDescriptor,
        /// The request with the fixed `fields`; each call clones it and sets `code`.
        template: DynamicMessage,
        code: FieldDescriptor,
        /// Receives the request context as JSON, when configured.
        context: Option<FieldDescriptor>,
        valid: FieldDescriptor,
        expected: Expected,
        trace: Option<FieldDescriptor>,
    }

    fn field_names(m: &MessageDescriptor) -> String {
        m.fields()
            .map(|f| f.name().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn field(m: &MessageDescriptor, name: &str, key: &str) -> Result<FieldDescriptor, BuildError> {
        m.get_field_by_name(name).ok_or_else(|| {
            BuildError::at(
                key,
                format!(
                    "{} has no field '{name}' (its fields: {})",
                    m.full_name(),
                    field_names(m)
                ),
            )
        })
    }

    /// The field `name` of `m`, which must be a string (or, with `repeated`, a list of them).
    fn string_field(
        m: &MessageDescriptor,
        name: &str,
        key: &str,
        repeated: bool,
    ) -> Result<FieldDescriptor, BuildError> {
        let f = field(m, name, key)?;
        if f.kind() != Kind::String || f.is_map() || (f.is_list() && !repeated) {
            let wanted = if repeated {
                "a string or repeated string"
            } else {
                "a string"
            };
            let found = kind_name(&f);
            let message = format!("'{}' is a {found}: it must be {wanted}", f.name());
            return Err(BuildError::at(key, message));
        }
        Ok(f)
    }

    fn kind_name(f: &FieldDescriptor) -> String {
        let base = match f.kind() {
            Kind::Message(m) => m.full_name().to_string(),
            Kind::Enum(e) => e.full_name().to_string(),
            k => format!("{k:?}").to_ascii_lowercase(),
        };
        if f.is_map() {
            "map".into()
        } else if f.is_list() {
            format!("repeated {base}")
        } else {
            base
        }
    }

    fn load_pool(c: &GrpcConfig, input: &FactoryInput<'_>) -> Result<DescriptorPool, BuildError> {
        match (&c.proto, &c.descriptor_set) {
            (Some(proto), None) => {
                let path = input.resolve(proto);
                if !path.is_file() {
                    return Err(BuildError::at(
                        "grpc.proto",
                        format!("cannot read {}: no such file", path.display()),
                    ));
                }
                let mut includes: Vec<PathBuf> =
                    c.include.iter().map(|d| input.resolve(d)).collect();
                if let Some(dir) = path.parent() {
                    includes.push(dir.to_path_buf());
                }
                let mut compiler = protox::Compiler::new(&includes)
                    .map_err(|e| BuildError::at("grpc.include", e.to_string()))?;
                compiler.include_imports(true);
                compiler.open_file(&path).map_err(|e| {
                    BuildError::at(
                        "grpc.proto",
                        format!("cannot compile {}: {e}", path.display()),
                    )
                })?;
                Ok(compiler.descriptor_pool())
            }
            (None, Some(set)) => {
                let path = input.resolve(set);
                let bytes = std::fs::read(&path).map_err(|e| {
                    BuildError::at(
                        "grpc.descriptor_set",
                        format!("cannot read {}: {e}", path.display()),
                    )
                })?;
                DescriptorPool::decode(bytes.as_slice()).map_err(|e| {
                    BuildError::at(
                        "grpc.descriptor_set",
                        format!("{} is not a descriptor set: {e}", path.display()),
                    )
                })
            }
            _ => Err(BuildError::at(
                "grpc",
                "the gRPC target needs exactly one of 'proto' and 'descriptor_set'",
            )),
        }
    }

    fn expected(
        valid: &FieldDescriptor,
        value: Option<&ValidValue>,
    ) -> Result<Expected, BuildError> {
        const KEY: &str = "grpc.response.valid_value";
        if valid.is_list() || valid.is_map() {
            return Err(BuildError::at(
                "grpc.response.valid_field",
                format!(
                    "'{}' is a {}: it must be a bool, an enum or a string",
                    valid.name(),
                    kind_name(valid)
                ),
            ));
        }
        match (valid.kind(), value) {
            (Kind::Bool, None) => Ok(Expected::Bool(true)),
            (Kind::Bool, Some(ValidValue::Bool(b))) => Ok(Expected::Bool(*b)),
            (Kind::Bool, Some(_)) => Err(BuildError::at(
                KEY,
                format!(
                    "'{}' is a bool: give true or false, or leave valid_value out",
                    valid.name()
                ),
            )),
            (Kind::Enum(e), Some(ValidValue::Text(name))) => e
                .get_value_by_name(name)
                .map(|v| Expected::Enum(v.number()))
                .ok_or_else(|| {
                    let names: Vec<String> = e.values().map(|v| v.name().to_string()).collect();
                    BuildError::at(
                        KEY,
                        format!(
                            "{} has no value '{name}' (its values: {})",
                            e.full_name(),
                            names.join(", ")
                        ),
                    )
                }),
            (Kind::Enum(e), Some(ValidValue::Number(n))) => i32::try_from(*n)
                .ok()
                .and_then(|n| e.get_value(n))
                .map(|v| Expected::Enum(v.number()))
                .ok_or_else(|| {
                    BuildError::at(KEY, format!("{} has no value numbered {n}", e.full_name()))
                }),
            (Kind::String, Some(ValidValue::Text(s))) => Ok(Expected::Text(s.clone())),
            (Kind::Enum(_) | Kind::String, _) => Err(BuildError::at(
                KEY,
                format!(
                    "'{}' is a {}: name the value that means valid (valid_value)",
                    valid.name(),
                    kind_name(valid)
                ),
            )),
            _ => Err(BuildError::at(
                "grpc.response.valid_field",
                format!(
                    "'{}' is a {}: it must be a bool, an enum or a string",
                    valid.name(),
                    kind_name(valid)
                ),
            )),
        }
    }

    impl GrpcTarget {
        /// Builds the target from the `grpc:` options: compiles or reads the descriptors,
        /// finds the method and checks the configured fields against it, so every mistake is
        /// a start-up error naming its key. `ca_pem` adds trusted CA certificates for
        /// `https://`.
        pub(crate) fn new(
            c: &GrpcConfig,
            input: &FactoryInput<'_>,
            ca_pem: Option<&[u8]>,
        ) -> Result<Self, BuildError> {
            let pool = load_pool(c, input)?;
            let (service_name, method_name) = c
                .method
                .trim_start_matches('/')
                .split_once('/')
                .ok_or_else(|| {
                    BuildError::at(
                        "grpc.method",
                        format!("'{}' is not package.Service/Method", c.method),
                    )
                })?;
            let service = pool.get_service_by_name(service_name).ok_or_else(|| {
                let known: Vec<String> =
                    pool.services().map(|s| s.full_name().to_string()).collect();
                BuildError::at(
                    "grpc.method",
                    format!(
                        "no service '{service_name}' in the descriptors (services: {})",
                        known.join(", ")
                    ),
                )
            })?;
            let method = service
                .methods()
                .find(|m| m.name() == method_name)
                .ok_or_else(|| {
                    let known: Vec<String> =
                        service.methods().map(|m| m.name().to_string()).collect();
                    BuildError::at(
                        "grpc.method",
                        format!(
                            "{service_name} has no method '{method_name}' (methods: {})",
                            known.join(", ")
                        ),
                    )
                })?;
            if method.is_client_streaming() || method.is_server_streaming() {
                return Err(BuildError::at(
                    "grpc.method",
                    format!(
                        "{} streams: only unary methods can check a response",
                        method.full_name()
                    ),
                ));
            }
            let path = http::uri::PathAndQuery::try_from(format!("/{service_name}/{method_name}"))
                .map_err(|e| BuildError::at("grpc.method", e.to_string()))?;

            let request = method.input();
            let code_key = "grpc.request.code_field";
            let code = string_field(&request, &c.request.code_field, code_key, false)?;
            if c.request.fields.contains_key(code.name())
                || c.request.fields.contains_key(code.json_name())
            {
                return Err(BuildError::at(
                    "grpc.request.fields",
                    format!(
                        "'{}' is the code_field: it receives the checked text",
                        code.name()
                    ),
                ));
            }
            let context = match &c.request.context_field {
                None => None,
                Some(name) => {
                    let key = "grpc.request.context_field";
                    let f = string_field(&request, name, key, false)?;
                    let taken = f.number() == code.number()
                        || c.request.fields.contains_key(f.name())
                        || c.request.fields.contains_key(f.json_name());
                    if taken {
                        return Err(BuildError::at(
                            key,
                            format!(
                                "'{}' is already the code_field or one of the fields",
                                f.name()
                            ),
                        ));
                    }
                    Some(f)
                }
            };
            let fields = serde_json::Value::Object(c.request.fields.clone().into_iter().collect());
            let template = DynamicMessage::deserialize(request.clone(), &fields).map_err(|e| {
                BuildError::at(
                    "grpc.request.fields",
                    format!(
                        "does not fit {}: {e} (its fields: {})",
                        request.full_name(),
                        field_names(&request)
                    ),
                )
            })?;

            let response = method.output();
            let valid = field(
                &response,
                &c.response.valid_field,
                "grpc.response.valid_field",
            )?;
            let expected = expected(&valid, c.response.valid_value.as_ref())?;
            let trace = c
                .response
                .trace_field
                .as_ref()
                .map(|name| string_field(&response, name, "grpc.response.trace_field", true));
            let trace = trace.transpose()?;

            let url = match c.url.split_once("://") {
                Some(("grpc", rest)) => format!("http://{rest}"),
                Some(("grpcs", rest)) => format!("https://{rest}"),
                _ => c.url.clone(),
            };
            let endpoint = Endpoint::from_shared(url.clone())
                .map_err(|e| BuildError::at("grpc.url", format!("'{}': {e}", c.url)))?;
            let endpoint = match endpoint.uri().scheme_str() {
                Some("https") => {
                    let mut tls = ClientTlsConfig::new().with_webpki_roots();
                    if let Some(pem) = ca_pem {
                        tls = tls.ca_certificate(Certificate::from_pem(pem));
                    }
                    endpoint
                        .tls_config(tls)
                        .map_err(|e| BuildError::at("grpc.url", format!("TLS: {e}")))?
                }
                Some("http") => {
                    if ca_pem.is_some() {
                        return Err(BuildError::at("ca_file", "a CA file needs an https:// URL"));
                    }
                    endpoint
                }
                _ => {
                    return Err(BuildError::at(
                        "grpc.url",
                        format!(
                            "'{}': only http://, https://, grpc:// and grpcs:// URLs",
                            c.url
                        ),
                    ))
                }
            };
            if endpoint.uri().host().is_none_or(str::is_empty) {
                return Err(BuildError::at(
                    "grpc.url",
                    format!("'{}' needs a host", c.url),
                ));
            }
            Ok(GrpcTarget {
                url: format!("{}{}", url.trim_end_matches('/'), path),
                endpoint,
                channel: Mutex::new(None),
                path,
                response,
                template,
                code,
                context,
                valid,
                expected,
                trace,
            })
        }

        /// The method's URL, for messages: `http://host:port/package.Service/Method`.
        pub fn url(&self) -> &str {
            &self.url
        }

        /// The channel to call through; `renew` replaces the cached one.
        fn channel(&self, renew: bool) -> Channel {
            let mut slot = self.channel.lock().unwrap_or_else(PoisonError::into_inner);
            if renew {
                *slot = None;
            }
            slot.get_or_insert_with(|| self.endpoint.connect_lazy())
                .clone()
        }

        /// Calls the method with `input` in the code field (and `context`, as JSON, in the
        /// context field when there is one), with `timeout` as the gRPC deadline;
        /// `Ok(None)` = passed, `Ok(Some(trace))` = rejected, `Err` = no verdict.
        pub(crate) async fn call(
            &self,
            input: &str,
            context: &enforce_core::Context,
            timeout: Duration,
        ) -> Result<Option<String>, Unavailable> {
            let mut client = tonic::client::Grpc::new(self.channel(false));
            if client.ready().await.is_err() {
                // The cached channel's worker may have ended with an earlier runtime.
                client = tonic::client::Grpc::new(self.channel(true));
                client
                    .ready()
                    .await
                    .map_err(|e| Unavailable::new(format!("{}: not ready: {e}", self.url)))?;
            }
            let mut message = self.template.clone();
            message.set_field(&self.code, Value::String(input.to_string()));
            if let Some(field) = &self.context {
                let json = crate::case_context::context_json(context);
                message.set_field(field, Value::String(json));
            }
            let mut request = tonic::Request::new(message);
            // The `grpc-timeout` header: the server can give up when enforce has.
            request.set_timeout(timeout);
            let codec = DynamicCodec {
                response: self.response.clone(),
            };
            let response = client
                .unary(request, self.path.clone(), codec)
                .await
                .map_err(|s| {
                    // The server gave up at the deadline enforce sent (tonic's server says
                    // Cancelled "Timeout expired"): the same timeout as enforce's own.
                    let deadline = s.code() == tonic::Code::DeadlineExceeded
                        || (s.code() == tonic::Code::Cancelled
                            && s.message().contains("Timeout expired"));
                    if deadline {
                        return Unavailable::new(format!(
                            "{} did not answer within {} ms (gRPC deadline)",
                            self.url,
                            timeout.as_millis()
                        ));
                    }
                    let mut text = format!("{}: {:?}", self.url, s.code());
                    if !s.message().is_empty() {
                        text.push_str(": ");
                        text.push_str(s.message());
                    }
                    Unavailable::new(text)
                })?;
            Ok(self.verdict(&response.into_inner()))
        }

        fn verdict(&self, m: &DynamicMessage) -> Option<String> {
            let passed = match (&self.expected, m.get_field(&self.valid).as_ref()) {
                (Expected::Bool(want), Value::Bool(got)) => want == got,
                (Expected::Enum(want), Value::EnumNumber(got)) => want == got,
                (Expected::Text(want), Value::String(got)) => want == got,
                _ => false,
            };
            if passed {
                return None;
            }
            let mut trace = match self.trace.as_ref().map(|f| m.get_field(f)) {
                Some(v) => match v.as_ref() {
                    Value::String(s) => s.clone(),
                    Value::List(items) => items
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join("\n"),
                    _ => String::new(),
                },
                None => String::new(),
            };
            if trace.trim().is_empty() {
                trace = format!(
                    "{} answered {} = {} without a trace",
                    self.url,
                    self.valid.name(),
                    describe_value(m.get_field(&self.valid).as_ref(), &self.valid)
                );
            }
            Some(trace)
        }
    }

    fn describe_value(v: &Value, f: &FieldDescriptor) -> String {
        match (v, f.kind()) {
            (Value::EnumNumber(n), Kind::Enum(e)) => e
                .get_value(*n)
                .map_or_else(|| n.to_string(), |v| v.name().to_string()),
            (Value::String(s), _) => format!("{s:?}"),
            (Value::Bool(b), _) => b.to_string(),
            (v, _) => format!("{v:?}"),
        }
    }

    /// A tonic codec for messages known only by descriptor: the request is encoded as is, the
    /// response decoded with the method's output descriptor.
    #[derive(Debug, Clone)]
    struct DynamicCodec {
        response: MessageDescriptor,
    }

    impl Codec for DynamicCodec {
        type Encode = DynamicMessage;
        type Decode = DynamicMessage;
        type Encoder = DynamicEncoder;
        type Decoder = DynamicDecoder;

        fn encoder(&mut self) -> Self::Encoder {
            DynamicEncoder
        }

        fn decoder(&mut self) -> Self::Decoder {
            DynamicDecoder(self.response.clone())
        }
    }

    #[derive(Debug)]
    struct DynamicEncoder;

    impl Encoder for DynamicEncoder {
        type Item = DynamicMessage;
        type Error = Status;

        fn encode(&mut self, item: DynamicMessage, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
            item.encode(dst)
                .map_err(|e| Status::internal(format!("cannot encode the request: {e}")))
        }
    }

    #[derive(Debug)]
    struct DynamicDecoder(MessageDescriptor);

    impl Decoder for DynamicDecoder {
        type Item = DynamicMessage;
        type Error = Status;

        fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<DynamicMessage>, Status> {
            DynamicMessage::decode(self.0.clone(), src)
                .map(Some)
                .map_err(|e| Status::internal(format!("cannot decode the response: {e}")))
        }
    }
}
