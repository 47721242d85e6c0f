//! The settings read the same way, one row each: the key in the file, the environment variable
//! over it, and how the value is checked and stored. A value is taken from the environment, else
//! the file, else the default, and a bad one is reported with the setting's key and its source.

use std::ops::RangeInclusive;
use std::path::PathBuf;

use super::parse::parse_timeout;
use super::parse::web_url;
use super::values::{Settings, SettingsError};
use super::written::SettingsFile;

/// Where values come from: the environment, then the settings file.
pub(super) struct Sources<'a> {
    pub(super) env: &'a dyn Fn(&str) -> Option<String>,
    pub(super) file_name: String,
}

impl Sources<'_> {
    /// The value of `env_name` if set, else the file's, trimmed, with the name of its source.
    pub(super) fn pick(
        &self,
        env_name: &str,
        from_file: Option<String>,
    ) -> Option<(String, String)> {
        match (self.env)(env_name) {
            Some(value) => Some((value, format!("environment variable {env_name}"))),
            None => from_file.map(|value| (value, self.file_name.clone())),
        }
        .map(|(value, source)| (value.trim().to_owned(), source))
    }
}

/// One setting: its key, its environment variable, and how it is read.
pub(super) struct Setting {
    key: &'static str,
    env: &'static str,
    read: Read,
}

/// How a setting's value is read.
enum Read {
    /// A whole number within `range` (of `unit`), stored where `field` says.
    Number {
        file: fn(&SettingsFile) -> Option<i64>,
        range: RangeInclusive<u32>,
        unit: &'static str,
        field: fn(&mut Settings) -> &mut u32,
    },
    /// A text checked and stored by `apply`, which says in words what is wrong.
    Text {
        file: fn(&SettingsFile) -> Option<String>,
        apply: fn(&mut Settings, String) -> Result<(), String>,
    },
}

impl Setting {
    /// Reads this setting into `settings` (left at its default when no source gives it).
    pub(super) fn read(
        &self,
        sources: &Sources<'_>,
        file: &SettingsFile,
        settings: &mut Settings,
    ) -> Result<(), SettingsError> {
        let invalid = |source_name: String, message: String| SettingsError::Invalid {
            setting: self.key,
            source_name,
            message,
        };
        match &self.read {
            Read::Number {
                file: from_file,
                range,
                unit,
                field,
            } => {
                let Some((value, source)) =
                    sources.pick(self.env, from_file(file).map(|n| n.to_string()))
                else {
                    return Ok(());
                };
                let number = value
                    .parse::<u32>()
                    .ok()
                    .filter(|n| range.contains(n))
                    .ok_or_else(|| {
                        let (start, end) = (range.start(), range.end());
                        let message = format!(
                            "`{value}` is not a whole number of {unit} from {start} to {end}"
                        );
                        invalid(source.clone(), message)
                    })?;
                *field(settings) = number;
            }
            Read::Text {
                file: from_file,
                apply,
            } => {
                if let Some((value, source)) = sources.pick(self.env, from_file(file)) {
                    apply(settings, value).map_err(|message| invalid(source, message))?;
                }
            }
        }
        Ok(())
    }
}

const fn number(
    key: &'static str,
    env: &'static str,
    file: fn(&SettingsFile) -> Option<i64>,
    range: RangeInclusive<u32>,
    unit: &'static str,
    field: fn(&mut Settings) -> &mut u32,
) -> Setting {
    Setting {
        key,
        env,
        read: Read::Number {
            file,
            range,
            unit,
            field,
        },
    }
}

const fn text(
    key: &'static str,
    env: &'static str,
    file: fn(&SettingsFile) -> Option<String>,
    apply: fn(&mut Settings, String) -> Result<(), String>,
) -> Setting {
    Setting {
        key,
        env,
        read: Read::Text { file, apply },
    }
}

/// Every setting read by a row, in the order they are checked.
pub(super) const SETTINGS: [Setting; 29] = [
    text(
        "site_addr",
        "NRLLM_SITE_ADDR",
        |f| f.site_addr.clone(),
        |s, v| {
            s.site_addr = v
                .parse()
                .map_err(|_| format!("`{v}` is not a host:port address such as 127.0.0.1:3000"))?;
            Ok(())
        },
    ),
    text(
        "database_url",
        "NRLLM_DATABASE_URL",
        |f| f.database_url.clone(),
        |s, v| {
            if nrllm_store::db::Backend::from_url(&v).is_none() {
                return Err("it must start with `sqlite:` or `postgres://`".to_owned());
            }
            s.database_url = v;
            Ok(())
        },
    ),
    text(
        "sqlite_synchronous",
        "NRLLM_SQLITE_SYNCHRONOUS",
        |f| f.sqlite_synchronous.clone(),
        |s, v| {
            s.sqlite_synchronous = match v.to_ascii_lowercase().as_str() {
                "full" => nrllm_store::db::SqliteSync::Full,
                "normal" => nrllm_store::db::SqliteSync::Normal,
                _ => return Err("it must be `full` or `normal`".to_owned()),
            };
            Ok(())
        },
    ),
    text(
        "log_level",
        "NRLLM_LOG",
        |f| f.log_level.clone(),
        |s, v| {
            tracing_subscriber::EnvFilter::try_new(&v)
                .map_err(|err| format!("`{v}` is not a log level or filter ({err})"))?;
            s.log_level = v;
            Ok(())
        },
    ),
    number(
        "retention_terminal_days",
        "NRLLM_RETENTION_TERMINAL_DAYS",
        |f| f.retention_terminal_days,
        1..=36_500,
        "days",
        |s| &mut s.retention_terminal_days,
    ),
    number(
        "retention_waiting_days",
        "NRLLM_RETENTION_WAITING_DAYS",
        |f| f.retention_waiting_days,
        1..=36_500,
        "days",
        |s| &mut s.retention_waiting_days,
    ),
    number(
        "demo_think_ms",
        "NRLLM_DEMO_THINK_MS",
        |f| f.demo_think_ms,
        0..=60_000,
        "milliseconds",
        |s| &mut s.demo_think_ms,
    ),
    number(
        "max_body_bytes",
        "NRLLM_MAX_BODY_BYTES",
        |f| f.max_body_bytes,
        16 * 1024..=64 * 1024 * 1024,
        "bytes",
        |s| &mut s.max_body_bytes,
    ),
    number(
        "stream_limit_per_run",
        "NRLLM_STREAM_LIMIT_PER_RUN",
        |f| f.stream_limit_per_run,
        1..=10_000,
        "streams",
        |s| &mut s.stream_limit_per_run,
    ),
    number(
        "stream_limit_total",
        "NRLLM_STREAM_LIMIT_TOTAL",
        |f| f.stream_limit_total,
        1..=100_000,
        "streams",
        |s| &mut s.stream_limit_total,
    ),
    number(
        "shutdown_grace_secs",
        "NRLLM_SHUTDOWN_GRACE_SECS",
        |f| f.shutdown_grace_secs,
        0..=600,
        "seconds",
        |s| &mut s.shutdown_grace_secs,
    ),
    text(
        "export_dir",
        "NRLLM_EXPORT_DIR",
        |f| f.export_dir.clone(),
        |s, v| {
            if v.is_empty() {
                return Err("give a folder".to_owned());
            }
            s.export_dir = PathBuf::from(v);
            Ok(())
        },
    ),
    text(
        "audit_key_file",
        "NRLLM_AUDIT_KEY_FILE",
        |f| f.audit_key_file.clone(),
        |s, v| {
            if v.is_empty() {
                return Err("give a file".to_owned());
            }
            s.audit_key_file = Some(PathBuf::from(v));
            Ok(())
        },
    ),
    number(
        "run_starts_per_minute",
        "NRLLM_RUN_STARTS_PER_MINUTE",
        |f| f.run_starts_per_minute,
        1..=100_000,
        "runs",
        |s| &mut s.run_starts_per_minute,
    ),
    number(
        "session_hours",
        "NRLLM_SESSION_HOURS",
        |f| f.session_hours,
        1..=24 * 90,
        "hours",
        |s| &mut s.session_hours,
    ),
    number(
        "webhook_max_attempts",
        "NRLLM_WEBHOOK_MAX_ATTEMPTS",
        |f| f.webhook_max_attempts,
        1..=30,
        "attempts",
        |s| &mut s.webhook_max_attempts,
    ),
    number(
        "webhook_backoff_ms",
        "NRLLM_WEBHOOK_BACKOFF_MS",
        |f| f.webhook_backoff_ms,
        10..=3_600_000,
        "milliseconds",
        |s| &mut s.webhook_backoff_ms,
    ),
    number(
        "lease_secs",
        "NRLLM_LEASE_SECS",
        |f| f.lease_secs,
        1..=3600,
        "seconds",
        |s| &mut s.lease_secs,
    ),
    number(
        "max_running_runs",
        "NRLLM_MAX_RUNNING_RUNS",
        |f| f.max_running_runs,
        1..=10_000,
        "runs",
        |s| &mut s.max_running_runs,
    ),
    number(
        "retry_max_wait_secs",
        "NRLLM_RETRY_MAX_WAIT_SECS",
        |f| f.retry_max_wait_secs,
        1..=3600,
        "seconds",
        |s| &mut s.retry_max_wait_secs,
    ),
    number(
        "max_state_bytes",
        "NRLLM_MAX_STATE_BYTES",
        |f| f.max_state_bytes,
        65_536..=1_073_741_824,
        "bytes",
        |s| &mut s.max_state_bytes,
    ),
    text(
        "approval_timeout",
        "NRLLM_APPROVAL_TIMEOUT",
        |f| f.approval_timeout.clone(),
        |s, v| {
            s.approval_timeout_ms = parse_timeout(&v)?;
            Ok(())
        },
    ),
    text(
        "webhook_url",
        "NRLLM_WEBHOOK_URL",
        |f| f.webhook_url.clone(),
        |s, v| {
            s.webhook_url = match v.is_empty() {
                true => None,
                false => Some(web_url(&v)?),
            };
            Ok(())
        },
    ),
    text(
        "webhook_secret_env",
        "NRLLM_WEBHOOK_SECRET_ENV",
        |f| f.webhook_secret_env.clone(),
        |s, v| {
            if v.is_empty() {
                return Err("name the environment variable that holds the secret".to_owned());
            }
            s.webhook_secret_env = v;
            Ok(())
        },
    ),
    number(
        "mcp_call_timeout_secs",
        "NRLLM_MCP_CALL_TIMEOUT_SECS",
        |f| f.mcp_call_timeout_secs,
        1..=3_600,
        "seconds",
        |s| &mut s.mcp_call_timeout_secs,
    ),
    number(
        "mcp_elicitation_timeout_secs",
        "NRLLM_MCP_ELICITATION_TIMEOUT_SECS",
        |f| f.mcp_elicitation_timeout_secs,
        1..=86_400,
        "seconds",
        |s| &mut s.mcp_elicitation_timeout_secs,
    ),
    text(
        "trace_url_template",
        "NRLLM_TRACE_URL_TEMPLATE",
        |f| f.trace_url_template.clone(),
        |s, v| {
            if web_url(&v).is_err()
                || !v.contains("{trace_id}")
                || v.len() > 500
                || v.contains(['"', '<', '>'])
            {
                return Err(
                    "it must be an http:// or https:// URL of at most 500 characters with \
                     {trace_id} in it, such as https://tempo.example/trace/{trace_id}"
                        .to_owned(),
                );
            }
            s.trace_url_template = Some(v);
            Ok(())
        },
    ),
    text(
        "otlp_endpoint",
        "NRLLM_OTLP_ENDPOINT",
        |f| f.otlp_endpoint.clone(),
        |s, v| {
            if web_url(&v).is_err() || v.len() > 500 {
                return Err(
                    "it must be the http:// or https:// URL of an OTLP receiver, such as \
                     http://127.0.0.1:4318 (http/protobuf) or http://127.0.0.1:4317 (grpc)"
                        .to_owned(),
                );
            }
            s.otlp_endpoint = Some(v);
            Ok(())
        },
    ),
    text(
        "otlp_protocol",
        "NRLLM_OTLP_PROTOCOL",
        |f| f.otlp_protocol.clone(),
        |s, v| {
            s.otlp_protocol = Some(nrllm_telemetry::OtlpProtocol::parse(&v)?);
            Ok(())
        },
    ),
];
