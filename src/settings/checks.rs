//! Checks of values that take more than a range: durations, web addresses, model configurations.

use super::parse::{parse_timeout, web_url};
use super::values::{ModelConfiguration, ProviderKind};

/// The model configurations as given, checked: each has its own name (not `demo`) and a model,
/// web addresses, a timeout, a temperature and prices that read. `env` fills an OpenAI
/// configuration's missing base URL from `OPENAI_BASE_URL`. The message says which is wrong.
pub(super) fn check_configurations(
    configurations: Vec<ModelConfiguration>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<ModelConfiguration>, String> {
    let mut checked: Vec<ModelConfiguration> = Vec::with_capacity(configurations.len());
    for mut configuration in configurations {
        let name = configuration.name.trim().to_owned();
        if name.is_empty() || name == "demo" || checked.iter().any(|c| c.name == name) {
            return Err(format!(
                "every configuration needs its own name, not empty and not `demo` (`{name}`)"
            ));
        }
        if configuration.kind == ProviderKind::Openai && configuration.base_url.is_none() {
            configuration.base_url = env("OPENAI_BASE_URL").filter(|url| !url.trim().is_empty());
        }
        check_configuration(&mut configuration)
            .map_err(|message| format!("configuration `{name}`{message}"))?;
        configuration.name = name;
        checked.push(configuration);
    }
    Ok(checked)
}

/// One configuration's fields; the message follows the configuration's name.
fn check_configuration(configuration: &mut ModelConfiguration) -> Result<(), String> {
    if configuration.model.trim().is_empty() {
        return Err(" has no model".to_owned());
    }
    if let Some(url) = &configuration.base_url {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(": base_url must start with http:// or https://".to_owned());
        }
    }
    if let Some(url) = configuration.webhook_url.as_mut() {
        *url = url.trim().to_owned();
        if !url.is_empty() {
            *url = web_url(url).map_err(|message| format!(": {message}"))?;
        }
    }
    if let Some(timeout) = &configuration.approval_timeout {
        parse_timeout(timeout).map_err(|message| format!(": {message}"))?;
    }
    if configuration
        .temperature
        .is_some_and(|t| !(0.0..=2.0).contains(&t))
    {
        return Err(": temperature must be from 0 to 2".to_owned());
    }
    let prices = configuration.prices();
    let prices = [
        prices.input,
        prices.output,
        prices.cached_input,
        prices.cache_write,
        prices.reasoning,
    ];
    if prices.iter().flatten().any(|p| !p.is_finite() || *p < 0.0) {
        return Err(": prices must be numbers of 0 or more".to_owned());
    }
    let most = nrllm_core::quorum::MAX_APPROVALS_REQUIRED;
    let counts = configuration
        .approvals_required
        .map(|n| ("approvals_required".to_owned(), n))
        .into_iter()
        .chain(
            configuration
                .tool_approvals_required
                .iter()
                .map(|(tool, n)| (format!("tool_approvals_required.{tool}"), *n)),
        );
    for (field, n) in counts {
        if !(1..=most).contains(&n) {
            return Err(format!(": {field} must be from 1 to {most} (people)"));
        }
    }
    super::values::check_usd(configuration.spend_cap_usd_per_day)
        .map_err(|message| format!(": spend_cap_usd_per_day: {message}"))?;
    if let Some(limits) = &configuration.limits {
        limits
            .check()
            .map_err(|message| format!(": limits: {message}"))?;
    }
    Ok(())
}
