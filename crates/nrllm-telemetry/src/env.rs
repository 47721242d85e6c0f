//! What OpenTelemetry's standard environment variables say about an export: where to send, with
//! which headers and timeout, in what batches, and the resource's attributes. Read through a
//! lookup function, so that tests give their own environment.

use std::time::Duration;

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

/// A process's environment: a variable's value by name.
pub(crate) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The first of `names` that is set and not blank.
pub(crate) fn first(env: Env<'_>, names: &[&str]) -> Option<(String, String)> {
    names.iter().find_map(|name| {
        env(name)
            .filter(|value| !value.trim().is_empty())
            .map(|value| ((*name).to_owned(), value.trim().to_owned()))
    })
}

/// Where the spans go, before the protocol is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    url: String,
    /// A base URL (the setting, or `OTEL_EXPORTER_OTLP_ENDPOINT`), to which OTLP/HTTP adds
    /// `/v1/traces`; else the traces' own URL, used as it is.
    base: bool,
}

impl Endpoint {
    /// The URL requests go to over `protocol`.
    pub(crate) fn url(&self, protocol: OtlpProtocol) -> String {
        match (self.base, protocol) {
            (true, OtlpProtocol::HttpProtobuf) => {
                format!("{}/v1/traces", self.url.trim_end_matches('/'))
            }
            _ => self.url.clone(),
        }
    }
}

/// Where the spans go: the setting, else the traces' own variable, else the general one; none
/// (export off) without any of them.
pub(crate) fn endpoint(setting: Option<&str>, env: Env<'_>) -> Option<Endpoint> {
    let base = |url: String| Endpoint { url, base: true };
    if let Some(url) = setting {
        return Some(base(url.to_owned()));
    }
    if let Some((_, url)) = first(env, &["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]) {
        return Some(Endpoint { url, base: false });
    }
    first(env, &["OTEL_EXPORTER_OTLP_ENDPOINT"]).map(|(_, url)| base(url))
}

/// The pairs of a `key=value,…` list with percent-encoded values (OpenTelemetry's headers and
/// resource attributes), keys trimmed; `None` for a pair that is not one (no `=`, no key, a
/// value not UTF-8). Blank entries are skipped.
fn pairs(list: &str) -> impl Iterator<Item = Option<(String, String)>> + '_ {
    list.split(',')
        .filter(|pair| !pair.trim().is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=')?;
            let value = percent_encoding::percent_decode_str(value.trim())
                .decode_utf8()
                .ok()?;
            let key = key.trim();
            (!key.is_empty()).then(|| (key.to_owned(), value.into_owned()))
        })
}

/// The headers every export request carries (`key=value,…`, values percent-encoded), as
/// `OTEL_EXPORTER_OTLP_TRACES_HEADERS` or else `OTEL_EXPORTER_OTLP_HEADERS` gives them; a
/// malformed pair refuses the list.
pub(crate) fn headers(env: Env<'_>) -> Result<Vec<(String, String)>, String> {
    let Some((name, list)) = first(
        env,
        &[
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "OTEL_EXPORTER_OTLP_HEADERS",
        ],
    ) else {
        return Ok(Vec::new());
    };
    pairs(&list)
        .map(|pair| {
            pair.map(|(key, value)| (key.to_ascii_lowercase(), value))
                .ok_or_else(|| format!("`{name}`: each header is key=value, its value UTF-8"))
        })
        .collect()
}

/// A number of milliseconds, or `default` when the variables are silent.
fn millis(env: Env<'_>, names: &[&str], default: u64) -> Result<Duration, String> {
    match first(env, names) {
        None => Ok(Duration::from_millis(default)),
        Some((name, value)) => value
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| format!("`{name}` is a number of milliseconds")),
    }
}

/// How long one export request may take (`OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`,
/// `OTEL_EXPORTER_OTLP_TIMEOUT`; 10 s).
pub(crate) fn timeout(env: Env<'_>) -> Result<Duration, String> {
    millis(
        env,
        &[
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ],
        10_000,
    )
}

/// How spans are batched: OpenTelemetry's batch processor's variables and defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Batching {
    /// The longest a finished span waits before it is sent (`OTEL_BSP_SCHEDULE_DELAY`, 5 s).
    pub delay: Duration,
    /// Spans waiting beyond this many are dropped, and counted (`OTEL_BSP_MAX_QUEUE_SIZE`, 2048).
    pub queue: usize,
    /// Spans in one request; this many waiting sends at once
    /// (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, 512, at most the queue).
    pub batch: usize,
}

impl Batching {
    pub(crate) fn from_env(env: Env<'_>) -> Result<Batching, String> {
        let count = |name: &str, default: usize| match first(env, &[name]) {
            None => Ok(default),
            Some((name, value)) => value
                .parse::<usize>()
                .ok()
                .filter(|count| *count > 0)
                .ok_or_else(|| format!("`{name}` is a whole number above 0")),
        };
        let queue = count("OTEL_BSP_MAX_QUEUE_SIZE", 2048)?;
        Ok(Batching {
            delay: millis(env, &["OTEL_BSP_SCHEDULE_DELAY"], 5_000)?,
            queue,
            batch: count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)?.min(queue),
        })
    }
}

/// The resource's attributes: `OTEL_RESOURCE_ATTRIBUTES` (`key=value,…`, values
/// percent-encoded; a malformed pair is left out, as the specification asks), then
/// `service.name` (`OTEL_SERVICE_NAME`, else `service_name`) and `service.instance.id`.
pub(crate) fn resource(
    env: Env<'_>,
    service_name: &str,
    instance: String,
) -> Vec<(String, String)> {
    let mut attributes: Vec<(String, String)> = first(env, &["OTEL_RESOURCE_ATTRIBUTES"])
        .map(|(_, list)| pairs(&list).flatten().collect())
        .unwrap_or_default();
    let service = first(env, &["OTEL_SERVICE_NAME"]).map_or(service_name.to_owned(), |(_, v)| v);
    for (key, value) in [
        ("service.name", service),
        ("service.instance.id", instance),
        ("telemetry.sdk.name", "nrllm".to_owned()),
        ("telemetry.sdk.language", "rust".to_owned()),
    ] {
        attributes.retain(|(existing, _)| existing != key);
        attributes.push((key.to_owned(), value));
    }
    attributes
}

/// Whether `OTEL_EXPORTER_OTLP_COMPRESSION` asks for a compression this build does not do.
pub(crate) fn unsupported_compression(env: Env<'_>) -> Option<String> {
    first(
        env,
        &[
            "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
            "OTEL_EXPORTER_OTLP_COMPRESSION",
        ],
    )
    .map(|(_, value)| value)
    .filter(|value| value != "none")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::env_of;

    #[test]
    fn the_endpoint_is_the_setting_else_the_traces_variable_as_it_is_else_the_base_one() {
        let none = env_of(&[]);
        let http = OtlpProtocol::HttpProtobuf;
        let url = |setting: Option<&str>, protocol, env: Env<'_>| {
            endpoint(setting, env).map(|endpoint| endpoint.url(protocol))
        };
        assert_eq!(url(None, http, &none), None);
        assert_eq!(
            url(Some("http://a:4318/"), http, &none).as_deref(),
            Some("http://a:4318/v1/traces")
        );
        assert_eq!(
            url(Some("http://a:4317"), OtlpProtocol::Grpc, &none).as_deref(),
            Some("http://a:4317")
        );
        let both = env_of(&[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:1/custom"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://b:2"),
        ]);
        assert_eq!(url(None, http, &both).as_deref(), Some("http://t:1/custom"));
        let base = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://b:2")]);
        assert_eq!(
            url(None, http, &base).as_deref(),
            Some("http://b:2/v1/traces")
        );
        assert_eq!(
            url(Some("http://s:3"), http, &both).as_deref(),
            Some("http://s:3/v1/traces")
        );
    }

    #[test]
    fn headers_are_decoded_and_a_malformed_list_is_refused_by_name() {
        let env = env_of(&[(
            "OTEL_EXPORTER_OTLP_HEADERS",
            "x-honeycomb-team=abc%3D%3D, Authorization=Basic%20dXNlcg==,",
        )]);
        assert_eq!(
            headers(&env).unwrap(),
            vec![
                ("x-honeycomb-team".to_owned(), "abc==".to_owned()),
                ("authorization".to_owned(), "Basic dXNlcg==".to_owned()),
            ]
        );
        let traces_first = env_of(&[
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "a=1"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "b=2"),
        ]);
        assert_eq!(
            headers(&traces_first).unwrap(),
            vec![("a".to_owned(), "1".to_owned())]
        );
        let bad = env_of(&[("OTEL_EXPORTER_OTLP_HEADERS", "a=1,novalue")]);
        let err = headers(&bad).unwrap_err();
        assert!(err.contains("OTEL_EXPORTER_OTLP_HEADERS"), "{err}");
        assert_eq!(headers(&env_of(&[])).unwrap(), vec![]);
    }

    #[test]
    fn batching_and_timeout_have_opentelemetrys_defaults_and_refuse_what_is_not_a_number() {
        assert_eq!(
            Batching::from_env(&env_of(&[])).unwrap(),
            Batching {
                delay: Duration::from_secs(5),
                queue: 2048,
                batch: 512
            }
        );
        let set = env_of(&[
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "400"),
        ]);
        assert_eq!(
            Batching::from_env(&set).unwrap(),
            Batching {
                delay: Duration::from_millis(50),
                queue: 100,
                batch: 100
            }
        );
        let zero = env_of(&[("OTEL_BSP_MAX_QUEUE_SIZE", "0")]);
        assert!(Batching::from_env(&zero)
            .unwrap_err()
            .contains("OTEL_BSP_MAX_QUEUE_SIZE"));
        assert_eq!(timeout(&env_of(&[])).unwrap(), Duration::from_secs(10));
        let words = env_of(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "ten")]);
        assert!(timeout(&words)
            .unwrap_err()
            .contains("OTEL_EXPORTER_OTLP_TIMEOUT"));
    }

    #[test]
    fn the_resource_takes_the_variables_attributes_and_names_the_service_and_instance() {
        let env = env_of(&[
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=prod%20eu,service.name=ignored,broken",
            ),
            ("OTEL_SERVICE_NAME", "from-env"),
        ]);
        let attributes = resource(&env, "nrllm-playground", "host-1".into());
        let get = |key: &str| {
            attributes
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("deployment.environment"), Some("prod eu"));
        assert_eq!(get("service.name"), Some("from-env"));
        assert_eq!(get("service.instance.id"), Some("host-1"));
        assert_eq!(
            attributes
                .iter()
                .filter(|(k, _)| k == "service.name")
                .count(),
            1
        );
        assert_eq!(attributes.len(), 5);
        let plain = resource(&env_of(&[]), "nrllm-playground", "h".into());
        assert_eq!(plain[0], ("service.name".into(), "nrllm-playground".into()));
    }
}
