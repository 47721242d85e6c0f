//! The model configurations the playground offers: the offline demo model, and each
//! `[[configurations]]` entry of the settings with its provider built once, at start (keys are
//! read from the environment here and live only inside the providers), its defaults and its
//! prices. A configuration that cannot be used (a missing key) is listed with the reason. It is
//! also the run service's loop factory: a run's configuration names the provider its loop asks.

use std::sync::Arc;

use nrllm_core::provider::{ModelOptions, Prices, Provider};
use nrllm_core::quorum::Quorum;
use nrllm_core::registry::ToolRegistry;
use nrllm_core::run_service::LoopFactory;
use nrllm_core::run_store::RunConfiguration;
use nrllm_core::spend::SpendCaps;
use nrllm_core::state::Limits;
use nrllm_core::{ToolLoop, ToolLoopService};
use nrllm_demo::demo::DemoProvider;
use nrllm_providers::anthropic::Anthropic;
use nrllm_providers::gemini::Gemini;
use nrllm_providers::http::{ApiKey, HttpSettings, RetryPolicy};
use nrllm_providers::openai::OpenAi;
use nrllm_providers::{HttpProvider, ProviderConfig, WireFormat};

use crate::page_data::ConfigurationView;
use crate::settings::{ModelConfiguration, ProviderKind, Settings};

/// The configuration every playground has: the offline demo model.
pub const DEMO_CONFIGURATION: &str = "demo";

/// A configured model: its provider if it can be used, else why not.
struct Configured {
    view: ConfigurationView,
    provider: Result<Arc<dyn Provider>, String>,
    defaults: ModelOptions,
    /// Its prices, for the cost estimate.
    prices: Prices,
    /// The budget its runs get unless their form says otherwise.
    limits: Limits,
    /// What its runs may spend in a UTC day together, and each user's.
    spend_caps: SpendCaps,
    /// The user who started a run cannot decide it.
    four_eyes: bool,
    /// How long a turn may wait for a decision, in milliseconds (`None`: until decided).
    approval_timeout_ms: Option<u64>,
    /// How many people must approve its turns.
    quorum: Quorum,
}

/// Every configuration, in the order the settings give them (the demo model first).
pub struct Configurations {
    configured: Vec<Configured>,
    registry: Arc<ToolRegistry>,
}

/// The provider for one `[[configurations]]` entry with its key, in its wire format.
fn http_provider(
    configuration: &ModelConfiguration,
    api_key: Option<ApiKey>,
    retry_max_wait: std::time::Duration,
) -> Result<Arc<dyn Provider>, String> {
    let base_url = configuration
        .base_url
        .clone()
        .unwrap_or_else(|| configuration.kind.default_base_url().to_owned());
    fn build<F: WireFormat>(
        config: ProviderConfig,
        format: F,
        stream: bool,
    ) -> Result<Arc<dyn Provider>, String> {
        HttpProvider::new(config, format)
            .map(|p| Arc::new(p.streaming(stream)) as Arc<dyn Provider>)
            .map_err(|err| err.message)
    }
    let stream = configuration.stream.unwrap_or(true);
    let format_openai = OpenAi {
        // OpenAI itself takes the newer `max_completion_tokens`; compatible servers `max_tokens`.
        max_completion_tokens: base_url.contains("api.openai.com"),
    };
    let config = ProviderConfig {
        name: configuration.name.clone(),
        base_url,
        model: configuration.model.clone(),
        api_key,
        http: HttpSettings {
            retry: RetryPolicy {
                max_delay: retry_max_wait,
                ..RetryPolicy::default()
            },
            ..HttpSettings::default()
        },
    };
    match configuration.kind {
        ProviderKind::Openai => build(config, format_openai, stream),
        ProviderKind::Anthropic => build(config, Anthropic, stream),
        ProviderKind::Gemini => build(config, Gemini, stream),
        ProviderKind::Demo => Err("the demo model speaks no wire format".to_owned()),
    }
}

impl Configurations {
    /// Builds every configuration's provider from the settings; runs' tool loops call tools from
    /// `registry`.
    pub fn from_settings(settings: &Settings, registry: Arc<ToolRegistry>) -> Configurations {
        let demo: Arc<dyn Provider> = Arc::new(DemoProvider::with_think_time(
            std::time::Duration::from_millis(u64::from(settings.demo_think_ms)),
        ));
        let mut configured = vec![Configured {
            view: ConfigurationView {
                name: DEMO_CONFIGURATION.to_owned(),
                model: "demo-1".to_owned(),
                available: true,
                reason: None,
                temperature: None,
                max_tokens: None,
            },
            provider: Ok(Arc::clone(&demo)),
            defaults: ModelOptions::default(),
            prices: Prices::default(),
            limits: settings.limits.to_limits(),
            spend_caps: settings.spend_caps.for_configuration(None),
            four_eyes: settings.four_eyes,
            approval_timeout_ms: settings.approval_timeout_ms,
            quorum: Quorum::default(),
        }];
        let retry_max_wait =
            std::time::Duration::from_secs(u64::from(settings.retry_max_wait_secs));
        for configuration in &settings.configurations {
            let provider = match configuration.key_env() {
                None if configuration.kind == ProviderKind::Demo => Ok(Arc::clone(&demo)),
                None => http_provider(configuration, None, retry_max_wait),
                Some(var) => match std::env::var(var) {
                    Ok(key) if !key.trim().is_empty() => http_provider(
                        configuration,
                        Some(ApiKey::from(key.trim())),
                        retry_max_wait,
                    ),
                    _ => Err(format!("set the environment variable {var} to its API key")),
                },
            };
            configured.push(Configured {
                view: ConfigurationView {
                    name: configuration.name.clone(),
                    model: configuration.model.clone(),
                    available: provider.is_ok(),
                    reason: provider.as_ref().err().cloned(),
                    temperature: configuration.temperature,
                    max_tokens: configuration.max_tokens,
                },
                provider,
                defaults: ModelOptions {
                    temperature: configuration.temperature,
                    max_tokens: configuration.max_tokens,
                    ..ModelOptions::default()
                },
                prices: configuration.prices(),
                limits: settings
                    .limits
                    .overridden_by(configuration.limits)
                    .to_limits(),
                spend_caps: settings
                    .spend_caps
                    .for_configuration(configuration.spend_cap_usd_per_day),
                four_eyes: configuration.four_eyes.unwrap_or(settings.four_eyes),
                approval_timeout_ms: match &configuration.approval_timeout {
                    // Checked when the settings were read.
                    Some(text) => crate::settings::parse_timeout(text).unwrap_or(None),
                    None => settings.approval_timeout_ms,
                },
                quorum: configuration.quorum(),
            });
        }
        Configurations {
            configured,
            registry,
        }
    }

    /// Whether runs of configuration `name` need a second person to decide (an unknown
    /// configuration: yes, the safe answer).
    pub fn four_eyes(&self, name: &str) -> bool {
        self.find(name).is_none_or(|c| c.four_eyes)
    }

    /// How long a turn of configuration `name` may wait for a decision, in milliseconds.
    pub fn approval_timeout_ms(&self, name: &str) -> Option<u64> {
        self.find(name).and_then(|c| c.approval_timeout_ms)
    }

    fn find(&self, name: &str) -> Option<&Configured> {
        self.configured.iter().find(|c| c.view.name == name)
    }

    /// The configurations as the playground lists them, usable or not (with the reason).
    pub fn views(&self) -> Vec<ConfigurationView> {
        self.configured.iter().map(|c| c.view.clone()).collect()
    }

    /// Every configuration's name, in order.
    pub fn names(&self) -> Vec<String> {
        self.configured
            .iter()
            .map(|c| c.view.name.clone())
            .collect()
    }

    /// Every configuration's prices, by name.
    pub fn all_prices(&self) -> std::collections::HashMap<String, Prices> {
        self.configured
            .iter()
            .map(|c| (c.view.name.clone(), c.prices))
            .collect()
    }

    /// Each configuration's daily spend caps, by name, in order.
    pub fn all_spend_caps(&self) -> Vec<(String, SpendCaps)> {
        self.configured
            .iter()
            .map(|c| (c.view.name.clone(), c.spend_caps))
            .collect()
    }

    /// The budget runs of configuration `name` get unless their form says otherwise.
    pub fn limits(&self, name: &str) -> Limits {
        self.find(name).map(|c| c.limits).unwrap_or_default()
    }

    /// A configuration's default temperature and token limit.
    pub fn defaults(&self, name: &str) -> ModelOptions {
        self.find(name)
            .map(|c| c.defaults.clone())
            .unwrap_or_default()
    }
}

impl LoopFactory for Configurations {
    fn tool_loop(
        &self,
        configuration: &RunConfiguration,
    ) -> Result<Arc<dyn ToolLoopService>, String> {
        match self.find(&configuration.provider).map(|c| &c.provider) {
            Some(Ok(provider)) => Ok(Arc::new(ToolLoop::new(
                Arc::clone(provider),
                Arc::clone(&self.registry),
            ))),
            Some(Err(reason)) => Err(format!(
                "the configuration `{}` is not available: {reason}",
                configuration.provider
            )),
            None => Err(format!(
                "there is no configuration `{}`",
                configuration.provider
            )),
        }
    }

    fn prices(&self, configuration: &RunConfiguration) -> Prices {
        self.find(&configuration.provider)
            .map(|configured| configured.prices)
            .unwrap_or_default()
    }

    fn spend_caps(&self, configuration: &RunConfiguration) -> SpendCaps {
        self.find(&configuration.provider)
            .map(|configured| configured.spend_caps)
            .unwrap_or_default()
    }

    fn quorum(&self, configuration: &RunConfiguration) -> Quorum {
        self.find(&configuration.provider)
            .map(|configured| configured.quorum.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configuration(name: &str, kind: ProviderKind, key_env: &str) -> ModelConfiguration {
        ModelConfiguration {
            name: name.into(),
            kind,
            model: "m-1".into(),
            base_url: Some("http://127.0.0.1:9/v1".into()),
            api_key_env: Some(key_env.into()),
            temperature: Some(0.4),
            max_tokens: None,
            stream: None,
            price_input_per_million: Some(2.0),
            price_output_per_million: Some(8.0),
            price_cached_input_per_million: None,
            price_cache_write_per_million: None,
            price_reasoning_per_million: None,
            limits: None,
            spend_cap_usd_per_day: None,
            four_eyes: None,
            approval_timeout: None,
            notify: None,
            webhook_url: None,
            webhook_secret_env: None,
            approvals_required: None,
            tool_approvals_required: Default::default(),
        }
    }

    #[test]
    fn configurations_without_their_key_are_listed_with_the_reason() {
        let settings = Settings {
            configurations: vec![
                configuration(
                    "cloud",
                    ProviderKind::Openai,
                    "NRLLM_TEST_KEY_THAT_IS_NEVER_SET",
                ),
                configuration("local", ProviderKind::Openai, ""),
                configuration("gem", ProviderKind::Gemini, ""),
            ],
            ..Settings::default()
        };
        let configurations =
            Configurations::from_settings(&settings, Arc::new(ToolRegistry::new()));
        let views = configurations.views();
        assert_eq!(
            views.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(),
            ["demo", "cloud", "local", "gem"]
        );
        assert!(views[0].available && views[2].available);
        assert!(!views[1].available);
        assert_eq!(
            views[1].reason.as_deref(),
            Some("set the environment variable NRLLM_TEST_KEY_THAT_IS_NEVER_SET to its API key")
        );
        assert!(views[3].available, "{:?}", views[3].reason);

        let run = |provider: &str| RunConfiguration {
            continues: None,
            approval_timeout_ms: None,
            provider: provider.into(),
            model: "m-1".into(),
            prompt: "p".into(),
            system_prompt: None,
            skills: Vec::new(),
            settings: Default::default(),
        };
        let err = configurations.tool_loop(&run("cloud")).err().unwrap();
        assert!(
            err.contains("not available") && err.contains("NRLLM_TEST_KEY_THAT_IS_NEVER_SET"),
            "{err}"
        );
        assert!(configurations.tool_loop(&run("local")).is_ok());
        // $2 and $8 per million tokens: 1000 prompt + 500 completion tokens = $0.006.
        let usage = nrllm_core::provider::Usage::tokens(1000, 500);
        assert_eq!(
            configurations.estimate_cost_micros(&run("local"), usage),
            Some(6000)
        );
        assert_eq!(
            configurations.estimate_cost_micros(&run("demo"), usage),
            None
        );
        assert_eq!(configurations.defaults("local").temperature, Some(0.4));
    }

    #[test]
    fn four_eyes_follows_the_configuration_then_the_setting_and_a_demo_configuration_works() {
        let mut reviewed = configuration("reviewed", ProviderKind::Demo, "");
        reviewed.four_eyes = Some(true);
        let mut relaxed = configuration("relaxed", ProviderKind::Openai, "");
        relaxed.four_eyes = Some(false);
        let settings = Settings {
            configurations: vec![
                reviewed,
                relaxed,
                configuration("plain", ProviderKind::Openai, ""),
            ],
            four_eyes: false,
            ..Settings::default()
        };
        let configurations =
            Configurations::from_settings(&settings, Arc::new(ToolRegistry::new()));
        assert!(configurations.four_eyes("reviewed"));
        assert!(!configurations.four_eyes("relaxed"));
        assert!(!configurations.four_eyes("plain"));
        assert!(!configurations.four_eyes("demo"));
        assert!(
            configurations.four_eyes("gone"),
            "an unknown configuration is held to it"
        );
        let views = configurations.views();
        assert!(views.iter().any(|v| v.name == "reviewed" && v.available));
        let strict = Settings {
            four_eyes: true,
            ..settings
        };
        let configurations = Configurations::from_settings(&strict, Arc::new(ToolRegistry::new()));
        assert!(configurations.four_eyes("demo") && configurations.four_eyes("plain"));
        assert!(!configurations.four_eyes("relaxed"));
    }
}
