//! Traces for the operators' tracing tools: the runs' spans ([`nrllm_core::spans`]) exported
//! over OTLP, HTTP/protobuf or gRPC, in batches, when an endpoint is set (the `otlp_endpoint`
//! setting, or OpenTelemetry's own `OTEL_EXPORTER_OTLP_ENDPOINT` and friends); nothing is
//! installed otherwise, so export off costs nothing.
//!
//! The server and the `hitl` benchmark install the same exporter through [`Telemetry::install`].
//! With the `receiver` feature, [`receiver`] is a small OTLP receiver that keeps what it is
//! sent, for tests and benchmarks.

mod batch;
mod env;
mod export;
#[cfg(feature = "receiver")]
pub mod receiver;
#[cfg(test)]
mod testing;

use std::sync::{Arc, Mutex};

pub use batch::OtlpSpans;
pub use env::OtlpProtocol;

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

impl Config {
    /// Whether spans are exported, with `env` the process's environment: an endpoint is set.
    pub fn enabled(&self, env: &dyn Fn(&str) -> Option<String>) -> bool {
        env::endpoint(self.endpoint.as_deref(), env).is_some()
    }

    /// The protocol in force, with `env` the process's environment.
    pub fn protocol(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<OtlpProtocol, String> {
        if let Some(protocol) = self.protocol {
            return Ok(protocol);
        }
        let named = env::first(
            env,
            &[
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ],
        );
        named.map_or(Ok(OtlpProtocol::HttpProtobuf), |(_, value)| {
            OtlpProtocol::parse(&value)
        })
    }
}

/// Spans being exported: flush with [`Telemetry::shutdown`] before the process ends.
pub struct Telemetry {
    spans: Arc<OtlpSpans>,
    /// Hears when the export's thread has sent its last spans.
    finished: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    /// How long [`Telemetry::shutdown`] waits for that.
    last_wait: std::time::Duration,
}

impl Telemetry {
    /// Builds the export `config` (and OpenTelemetry's environment variables) asks for, starts
    /// its thread and installs it as the core's span export; `None` when export is off.
    /// Once per process.
    pub fn install(config: &Config) -> Result<Option<Telemetry>, String> {
        let env = |name: &str| std::env::var(name).ok();
        let Some(endpoint) = env::endpoint(config.endpoint.as_deref(), &env) else {
            return Ok(None);
        };
        let protocol = config.protocol(&env)?;
        let url = endpoint.url(protocol);
        if let Some(compression) = env::unsupported_compression(&env) {
            return Err(format!(
                "OTLP compression `{}` is not built in: unset OTEL_EXPORTER_OTLP_COMPRESSION",
                compression.chars().take(40).collect::<String>()
            ));
        }
        let headers = env::headers(&env)?;
        let timeout = env::timeout(&env)?;
        let batching = env::Batching::from_env(&env)?;
        // Each process is its own instance: a trace shows which one did what.
        let instance = format!("{}-{}", hostname(), std::process::id());
        let resource: Vec<_> = env::resource(&env, &config.service_name, instance)
            .into_iter()
            .map(|(key, value)| export::text(&key, value))
            .collect();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|err| format!("the OTLP export's runtime: {err}"))?;
        let transport = match protocol {
            OtlpProtocol::HttpProtobuf => batch::Transport::http(url, &headers, timeout)?,
            OtlpProtocol::Grpc => {
                let _inside = runtime.enter();
                batch::Transport::grpc(url, &headers, timeout)?
            }
        };
        let spans = Arc::new(OtlpSpans::new(batching, config.message_contents));
        let telemetry = Telemetry::start(Arc::clone(&spans), runtime, transport, resource)?;
        nrllm_core::spans::install(spans);
        Ok(Some(telemetry))
    }

    /// Starts the export's thread, which sends what `spans` gathers until shut down.
    fn start(
        spans: Arc<OtlpSpans>,
        runtime: tokio::runtime::Runtime,
        transport: batch::Transport,
        resource: Vec<opentelemetry_proto::tonic::common::v1::KeyValue>,
    ) -> Result<Telemetry, String> {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("nrllm-otlp".into())
            .spawn({
                let spans = Arc::clone(&spans);
                move || {
                    batch::run(&spans, &runtime, transport, resource);
                    let _ = done.send(());
                }
            })
            .map_err(|err| format!("the OTLP export's thread: {err}"))?;
        Ok(Telemetry {
            spans,
            finished: Mutex::new(Some(finished)),
            last_wait: SHUTDOWN_WAIT,
        })
    }

    /// Sends what is still waiting, and stops; gives up after a few seconds (an endpoint that
    /// does not answer must not hold up the process's stop), saying so in the log.
    pub fn shutdown(&self) {
        self.spans.close();
        let finished = self
            .finished
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(finished) = finished {
            if finished.recv_timeout(self.last_wait).is_err() {
                tracing::warn!(
                    wait_s = self.last_wait.as_secs_f64(),
                    "the OTLP export's last spans were not sent in time; they are dropped"
                );
            }
        }
    }
}

/// How long a shutdown waits for the last spans to leave.
const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// This machine's name, as the kernel has it (empty if it cannot be read).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().chars().take(64).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::env_of;

    fn config() -> Config {
        Config {
            endpoint: None,
            protocol: None,
            message_contents: false,
            service_name: "test".into(),
        }
    }

    #[test]
    fn a_shutdown_sends_the_last_spans_and_gives_up_on_an_endpoint_that_never_answers() {
        use nrllm_core::spans::SpanExport as _;
        use std::io::Read as _;
        use std::time::{Duration, Instant};
        let batching = env::Batching::from_env(&env_of(&[])).unwrap();
        let start = |url: String, wait: Duration| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let transport = batch::Transport::http(url, &[], Duration::from_secs(60)).unwrap();
            let spans = Arc::new(OtlpSpans::new(batching, false));
            let mut telemetry =
                Telemetry::start(Arc::clone(&spans), runtime, transport, Vec::new()).unwrap();
            telemetry.last_wait = wait;
            (spans, telemetry)
        };

        // An endpoint that answers: the span waiting at shutdown reaches it.
        let answering = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/traces", answering.local_addr().unwrap());
        let (heard, served) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mut stream, _) = answering.accept().unwrap();
            let mut request = vec![0; 64 * 1024];
            let read = stream.read(&mut request).unwrap();
            use std::io::Write as _;
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .unwrap();
            let _ = heard.send(String::from_utf8_lossy(&request[..read]).into_owned());
        });
        let (spans, telemetry) = start(url, Duration::from_secs(30));
        spans.export(crate::testing::root(0, true));
        telemetry.shutdown();
        let request = served
            .recv_timeout(Duration::from_secs(10))
            .expect("the last span's request reached the endpoint");
        assert!(request.starts_with("POST /v1/traces"), "{request}");
        assert!(request.contains("application/x-protobuf"), "{request}");

        // One that takes the connection and never answers: the stop waits only so long.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/traces", silent.local_addr().unwrap());
        let (spans, telemetry) = start(url, Duration::from_millis(200));
        spans.export(crate::testing::root(0, true));
        let asked = Instant::now();
        telemetry.shutdown();
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "{:?}",
            asked.elapsed()
        );
        drop(silent);
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
