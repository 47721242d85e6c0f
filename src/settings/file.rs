//! Reading the settings: the file, then the environment over it, setting by setting as the table
//! says, then the settings that depend on others.

use std::path::{Path, PathBuf};

use super::checks::check_configurations;
use super::table::{Sources, SETTINGS};
use super::values::{default_hosts, Settings, SettingsError};
use super::written::SettingsFile;

/// The settings file read when `NRLLM_CONFIG` is not set.
pub const DEFAULT_SETTINGS_FILE: &str = "Leptos.toml";

impl Settings {
    /// Loads the settings from the file named by `NRLLM_CONFIG` (default `Leptos.toml`; a missing
    /// default file means defaults) and applies the `NRLLM_*` environment overrides.
    pub fn load() -> Result<Settings, SettingsError> {
        let explicit = std::env::var_os("NRLLM_CONFIG").map(PathBuf::from);
        let path = explicit
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SETTINGS_FILE));
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => Some(text),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => None,
            Err(source) => {
                return Err(SettingsError::Read {
                    path: path.display().to_string(),
                    source,
                })
            }
        };
        Self::from_sources(&path, text.as_deref(), |name| std::env::var(name).ok())
    }

    /// Builds settings from a file's text (if any) and an environment lookup.
    pub fn from_sources(
        path: &Path,
        text: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Settings, SettingsError> {
        let file_name = path.display().to_string();
        let file: SettingsFile = match text {
            Some(text) => toml::from_str(text).map_err(|err| SettingsError::Syntax {
                path: file_name.clone(),
                message: err.message().to_owned(),
            })?,
            None => SettingsFile::default(),
        };
        let sources = Sources {
            env: &env,
            file_name,
        };
        let mut settings = Settings::default();
        for setting in &SETTINGS {
            setting.read(&sources, &file, &mut settings)?;
        }
        settings.allowed_hosts = allowed_hosts(&sources, &file, &settings)?;
        settings.public_url = public_url(&sources, &file, &settings)?;
        settings.four_eyes = flag(
            &sources,
            ("four_eyes", "NRLLM_FOUR_EYES"),
            file.four_eyes,
            settings.four_eyes,
        )?;
        settings.trace_message_contents = flag(
            &sources,
            ("trace_message_contents", "NRLLM_TRACE_MESSAGE_CONTENTS"),
            file.trace_message_contents,
            settings.trace_message_contents,
        )?;
        let invalid = |setting: &'static str| {
            let source_name = sources.file_name.clone();
            move |message: String| SettingsError::Invalid {
                setting,
                source_name,
                message,
            }
        };
        settings.mcp_servers = nrllm_mcp::config::check(
            file.mcp_servers.as_deref().unwrap_or_default(),
            settings.mcp_call_timeout_secs,
        )
        .map_err(invalid("mcp_servers"))?;
        settings.configurations =
            check_configurations(file.configurations.unwrap_or_default(), &env)
                .map_err(invalid("configurations"))?;
        settings.limits = file.limits.unwrap_or_default();
        settings.limits.check().map_err(invalid("limits"))?;
        settings.spend_caps = file.spend_caps.unwrap_or_default();
        settings.spend_caps.check().map_err(invalid("spend_caps"))?;
        settings.notifications =
            super::notify::Notifications::from_file(file.notifications.unwrap_or_default())
                .map_err(invalid("notifications"))?;
        for configuration in &settings.configurations {
            settings
                .notifications
                .policy(configuration.notify.as_ref())
                .map_err(|message| format!("{}: notify: {message}", configuration.name))
                .map_err(invalid("configurations"))?;
        }
        Ok(settings)
    }
}

/// The host names the server answers to: `NRLLM_ALLOWED_HOSTS` (comma-separated), else the
/// file's list, else those of the address it listens on.
fn allowed_hosts(
    sources: &Sources<'_>,
    file: &SettingsFile,
    settings: &Settings,
) -> Result<Vec<String>, SettingsError> {
    let (hosts, source_name): (Vec<String>, String) =
        match ((sources.env)("NRLLM_ALLOWED_HOSTS"), &file.allowed_hosts) {
            (Some(value), _) => (
                value
                    .split(',')
                    .map(|h| h.trim().to_ascii_lowercase())
                    .collect(),
                "environment variable NRLLM_ALLOWED_HOSTS".to_owned(),
            ),
            (None, Some(hosts)) => (
                hosts
                    .iter()
                    .map(|h| h.trim().to_ascii_lowercase())
                    .collect(),
                sources.file_name.clone(),
            ),
            (None, None) => return Ok(default_hosts(settings.site_addr)),
        };
    if hosts.is_empty()
        || hosts
            .iter()
            .any(|h| h.is_empty() || h.contains(['/', ':', ' ']) && !h.contains("::"))
    {
        return Err(SettingsError::Invalid {
            setting: "allowed_hosts",
            source_name,
            message: "give host names without scheme or port, such as \"playground.example.com\""
                .to_owned(),
        });
    }
    Ok(hosts)
}

/// The address users reach the server at: as given, else the address it listens on.
fn public_url(
    sources: &Sources<'_>,
    file: &SettingsFile,
    settings: &Settings,
) -> Result<String, SettingsError> {
    match sources.pick("NRLLM_PUBLIC_URL", file.public_url.clone()) {
        Some((value, source_name)) => {
            if !(value.starts_with("http://") || value.starts_with("https://")) {
                return Err(SettingsError::Invalid {
                    setting: "public_url",
                    source_name,
                    message: format!("`{value}` must start with http:// or https://"),
                });
            }
            Ok(value.trim_end_matches('/').to_owned())
        }
        None => Ok(format!("http://{}", settings.site_addr)),
    }
}

/// A yes-or-no setting `key`: its environment variable `env_name` (`true`, `1`, `false`,
/// `0`), else the file's `from_file`, else `default`.
fn flag(
    sources: &Sources<'_>,
    (key, env_name): (&'static str, &str),
    from_file: Option<bool>,
    default: bool,
) -> Result<bool, SettingsError> {
    match ((sources.env)(env_name), from_file) {
        (Some(value), _) => match value.trim() {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            other => Err(SettingsError::Invalid {
                setting: key,
                source_name: format!("environment variable {env_name}"),
                message: format!("`{other}` is not true or false"),
            }),
        },
        (None, Some(value)) => Ok(value),
        (None, None) => Ok(default),
    }
}
