//! Traces for the operators' tracing tools: the runs' spans ([`nrllm_core::spans`]) exported
//! over OTLP, HTTP/protobuf or gRPC, in batches, when an endpoint is set (the `otlp_endpoint`
//! setting, or OpenTelemetry's own `OTEL_EXPORTER_OTLP_ENDPOINT` and friends); nothing is
//! installed otherwise, so export off costs nothing.
//!
//! The server and the `hitl` benchmark install the same exporter through [`Telemetry::install`].
//! With the `receiver` feature, [`receiver`] is a small OTLP receiver that keeps what it is
//! sent, for tests and benchmarks.

mod export;
#[cfg(feature = "receiver")]
pub mod receiver;

use std::sync::Arc;

use opentelemetry::InstrumentationScope;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{BatchSpanProcessor, SpanProcessor as _};
use opentelemetry_sdk::Resource;

pub use export::OtelSpans;

/// How spans travel to the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies (`POST <endpoint>/v1/traces`).
    HttpProtobuf,
    /// OTLP/gRPC.
    Grpc,
}

impl OtlpProtocol {
    /// The protocol as OpenTelemetry's settings spell it (`http/protobuf`, `grpc`).
    pub fn parse(text: &str) -> Result<OtlpProtocol, String> {
        match text.trim() {
            "http/protobuf" | "http" => Ok(OtlpProtocol::HttpProtobuf),
            "grpc" => Ok(OtlpProtocol::Grpc),
            other => Err(format!(
                "`{}` is not an OTLP protocol this server speaks: use http/protobuf or grpc",
                other.chars().take(40).collect::<String>()
            )),
        }
    }
}

/// What to export, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The OTLP endpoint's base URL (as `OTEL_EXPORTER_OTLP_ENDPOINT`: `/v1/traces` is added for
    /// HTTP). None: OpenTelemetry's environment variables decide, and without them nothing is
    /// exported.
    pub endpoint: Option<String>,
    /// None: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` or `OTEL_EXPORTER_OTLP_PROTOCOL`, else HTTP.
    pub protocol: Option<OtlpProtocol>,
    /// Whether message contents go on spans (off by default, as the GenAI conventions advise).
    pub message_contents: bool,
    /// The `service.name` of the spans (unless `OTEL_SERVICE_NAME` says otherwise).
    pub service_name: String,
}

/// The environment variables that turn export on without the `otlp_endpoint` setting.
const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

impl Config {
    /// Whether spans are exported, with `env` the process's environment.
    pub fn enabled(&self, env: &dyn Fn(&str) -> Option<String>) -> bool {
        self.endpoint.is_some()
            || ENDPOINT_VARIABLES
                .iter()
                .any(|name| env(name).is_some_and(|value| !value.trim().is_empty()))
    }

    /// The protocol in force, with `env` the process's environment.
    pub fn protocol(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<OtlpProtocol, String> {
        if let Some(protocol) = self.protocol {
            return Ok(protocol);
        }
        [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ]
        .iter()
        .find_map(|name| env(name).filter(|value| !value.trim().is_empty()))
        .map_or(Ok(OtlpProtocol::HttpProtobuf), |value| {
            OtlpProtocol::parse(&value)
        })
    }
}

/// Spans being exported: flush with [`Telemetry::shutdown`] before the process ends.
pub struct Telemetry {
    spans: Arc<OtelSpans>,
}

impl Telemetry {
    /// Builds the exporter `config` asks for and installs the core's span export; `None` when
    /// export is off. Call inside the Tokio runtime, once per process.
    pub fn install(config: &Config) -> Result<Option<Telemetry>, String> {
        let env = |name: &str| std::env::var(name).ok();
        if !config.enabled(&env) {
            return Ok(None);
        }
        let exporter = match config.protocol(&env)? {
            OtlpProtocol::HttpProtobuf => {
                let mut builder = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary);
                if let Some(endpoint) = &config.endpoint {
                    builder = builder
                        .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')));
                }
                builder.build()
            }
            OtlpProtocol::Grpc => {
                let mut builder = opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_protocol(Protocol::Grpc);
                if let Some(endpoint) = &config.endpoint {
                    builder = builder.with_endpoint(endpoint.clone());
                }
                builder.build()
            }
        }
        .map_err(|err| format!("the OTLP exporter could not be set up: {err}"))?;
        // Each process is its own instance: a trace shows which one did what.
        let resource = Resource::builder()
            .with_service_name(config.service_name.clone())
            .with_attribute(opentelemetry::KeyValue::new(
                "service.instance.id",
                format!("{}-{}", hostname(), std::process::id()),
            ))
            .build();
        let mut processor = BatchSpanProcessor::builder(exporter).build();
        processor.set_resource(&resource);
        let spans = Arc::new(OtelSpans {
            processor,
            scope: InstrumentationScope::builder("nrllm").build(),
            message_contents: config.message_contents,
        });
        nrllm_core::spans::install(spans.clone());
        Ok(Some(Telemetry { spans }))
    }

    /// Sends what is still buffered, and stops.
    pub fn shutdown(&self) {
        if let Err(err) = self.spans.processor.shutdown() {
            tracing::warn!(%err, "the OTLP exporter did not flush its last spans");
        }
    }
}

/// This machine's name, as the kernel has it (empty if it cannot be read).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().chars().take(64).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    fn config() -> Config {
        Config {
            endpoint: None,
            protocol: None,
            message_contents: false,
            service_name: "test".into(),
        }
    }

    #[test]
    fn export_is_on_by_the_setting_or_opentelemetrys_own_variables_only() {
        assert!(!config().enabled(&env_of(&[])));
        assert!(!config().enabled(&env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])));
        assert!(config().enabled(&env_of(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://127.0.0.1:4318"
        )])));
        assert!(config().enabled(&env_of(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://127.0.0.1:4318/v1/traces"
        )])));
        let set = Config {
            endpoint: Some("http://127.0.0.1:4318".into()),
            ..config()
        };
        assert!(set.enabled(&env_of(&[])));
    }

    #[test]
    fn the_protocol_is_the_settings_else_the_environments_else_http() {
        assert_eq!(
            config().protocol(&env_of(&[])),
            Ok(OtlpProtocol::HttpProtobuf)
        );
        assert_eq!(
            config().protocol(&env_of(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])),
            Ok(OtlpProtocol::Grpc)
        );
        let set = Config {
            protocol: Some(OtlpProtocol::HttpProtobuf),
            ..config()
        };
        assert_eq!(
            set.protocol(&env_of(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])),
            Ok(OtlpProtocol::HttpProtobuf)
        );
        let refused = config()
            .protocol(&env_of(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]))
            .unwrap_err();
        assert!(refused.contains("http/json"), "{refused}");
    }
}
