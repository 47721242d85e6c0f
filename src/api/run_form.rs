//! The playground form as posted, checked into a run's configuration.

use crate::api::checks::{
    at_most, MAX_PROMPT_CHARS, MAX_SKILLS_CHARS, MAX_SYSTEM_PROMPT_CHARS, MAX_TOOLS,
};
use crate::error::AppError;
use crate::page_data::ConfigurationView;
use crate::server::AppState;
use nrllm_core::assembly::Skill;
use nrllm_core::provider::ModelOptions;
use nrllm_core::registry::AllowList;
use nrllm_core::run_store::RunConfiguration;
use nrllm_core::state::{LimitKind, Limits};
use nrllm_core::RunSettings;

/// The playground form as posted.
pub struct RunForm {
    pub prompt: String,
    pub configuration: Option<String>,
    pub system_prompt: Option<String>,
    pub max_rounds: Option<String>,
    pub temperature: Option<String>,
    pub max_tokens: Option<String>,
    pub tools: Option<Vec<String>>,
    pub choose_tools: Option<String>,
    pub skills: Option<String>,
    pub limits: FormLimits,
}

/// The budget fields of the form, as typed: empty takes the configuration's limit, `none`
/// sets none, a number sets it.
#[derive(Debug, Clone, Default)]
pub struct FormLimits {
    pub input_tokens: Option<String>,
    pub output_tokens: Option<String>,
    /// US dollars.
    pub cost_usd: Option<String>,
    pub requests: Option<String>,
    pub tool_calls: Option<String>,
    /// Time spent running, in seconds.
    pub seconds: Option<String>,
}

/// The largest limit a form takes (tokens, requests, calls, seconds).
const MAX_LIMIT: u64 = 1_000_000_000_000;

impl FormLimits {
    /// The run's limits: `defaults` (the configuration's), with each field typed in over them.
    pub fn over(&self, defaults: Limits) -> Result<Limits, AppError> {
        let whole =
            |value: &Option<String>, field: &str| -> Result<Option<Option<u64>>, AppError> {
                match present(value) {
                    None => Ok(None),
                    Some(text) if text.eq_ignore_ascii_case("none") => Ok(Some(None)),
                    Some(_) => Ok(Some(number(
                        value,
                        field,
                        1..=MAX_LIMIT,
                        "a whole number from 1, or none",
                    )?)),
                }
            };
        let mut limits = defaults;
        let typed = [
            (
                LimitKind::InputTokens,
                whole(&self.input_tokens, "limit_input_tokens")?,
            ),
            (
                LimitKind::OutputTokens,
                whole(&self.output_tokens, "limit_output_tokens")?,
            ),
            (
                LimitKind::Requests,
                whole(&self.requests, "limit_requests")?,
            ),
            (
                LimitKind::ToolCalls,
                whole(&self.tool_calls, "limit_tool_calls")?,
            ),
            (
                LimitKind::WallMs,
                whole(&self.seconds, "limit_seconds")?.map(|s| s.map(|s| s * 1000)),
            ),
        ];
        for (kind, value) in typed {
            if let Some(value) = value {
                limits = limits.with(kind, value);
            }
        }
        match present(&self.cost_usd) {
            None => {}
            Some(text) if text.eq_ignore_ascii_case("none") => {
                limits = limits.with(LimitKind::CostMicros, None);
            }
            Some(_) => {
                let usd = number(
                    &self.cost_usd,
                    "limit_cost_usd",
                    0.000001..=1_000_000.0,
                    "an amount of dollars above 0, or none",
                )?;
                let micros = usd.map(|usd: f64| (usd * 1_000_000.0).round() as u64);
                limits = limits.with(LimitKind::CostMicros, micros);
            }
        }
        Ok(limits)
    }
}

fn present(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

impl RunForm {
    /// The run configuration, or the first field that is not acceptable.
    pub fn validate(self, state: &AppState) -> Result<RunConfiguration, AppError> {
        let prompt = self.prompt.trim().to_owned();
        if prompt.is_empty() {
            return Err(AppError::invalid(
                "prompt",
                "write what the agent should do",
            ));
        }
        self.check_sizes(&prompt)?;
        let chosen = self.chosen(state)?;
        let max_rounds = number(
            &self.max_rounds,
            "max_rounds",
            1..=20,
            "a whole number from 1 to 20",
        )?
        .unwrap_or(nrllm_core::state::DEFAULT_MAX_ROUNDS);
        let temperature = number(
            &self.temperature,
            "temperature",
            0.0..=2.0,
            "a number from 0 to 2",
        )?;
        let max_tokens = number(
            &self.max_tokens,
            "max_tokens",
            1..=200_000,
            "a whole number from 1 to 200000",
        )?;
        let allow_list = match (self.choose_tools.is_some(), &self.tools) {
            (false, None) => AllowList::All,
            (_, tools) => {
                let tools = tools.clone().unwrap_or_default();
                if let Some(unknown) = tools.iter().find(|t| state.registry.get(t).is_none()) {
                    return Err(AppError::invalid(
                        "tools",
                        format!("there is no tool `{unknown}`"),
                    ));
                }
                AllowList::only(tools)
            }
        };
        let skills = parse_skills(self.skills.as_deref().unwrap_or_default())?;
        let defaults = state.configurations.defaults(&chosen.name);
        let limits = self
            .limits
            .over(state.configurations.limits(&chosen.name))?;
        Ok(RunConfiguration {
            continues: None,
            approval_timeout_ms: state.configurations.approval_timeout_ms(&chosen.name),
            provider: chosen.name.clone(),
            model: chosen.model.clone(),
            prompt,
            system_prompt: present(&self.system_prompt).map(str::to_owned),
            skills,
            settings: RunSettings {
                allow_list,
                admin: false,
                model: model_options(temperature, max_tokens, defaults),
                max_rounds,
                limits,
            },
        })
    }

    /// Each text within its size, and no more tools than any registry holds.
    fn check_sizes(&self, prompt: &str) -> Result<(), AppError> {
        at_most("prompt", Some(prompt), MAX_PROMPT_CHARS)?;
        at_most(
            "system_prompt",
            self.system_prompt.as_deref(),
            MAX_SYSTEM_PROMPT_CHARS,
        )?;
        at_most("skills", self.skills.as_deref(), MAX_SKILLS_CHARS)?;
        if self.tools.as_ref().is_some_and(|t| t.len() > MAX_TOOLS) {
            return Err(AppError::invalid(
                "tools",
                format!("at most {MAX_TOOLS} tools"),
            ));
        }
        Ok(())
    }

    /// The configuration asked for (the demo's if none), if there is one and it is available.
    fn chosen(&self, state: &AppState) -> Result<ConfigurationView, AppError> {
        let configuration = present(&self.configuration)
            .unwrap_or(crate::server::configurations::DEMO_CONFIGURATION)
            .to_owned();
        let Some(chosen) = state
            .configurations
            .views()
            .into_iter()
            .find(|c| c.name == configuration)
        else {
            return Err(AppError::invalid(
                "configuration",
                format!("there is no configuration `{configuration}`"),
            ));
        };
        if !chosen.available {
            return Err(AppError::invalid(
                "configuration",
                chosen
                    .reason
                    .clone()
                    .unwrap_or_else(|| "this configuration is not available".into()),
            ));
        }
        Ok(chosen)
    }
}

/// A number typed in `field`, if any, within `range` (`words` say what is wanted).
fn number<T>(
    value: &Option<String>,
    field: &str,
    range: std::ops::RangeInclusive<T>,
    words: &str,
) -> Result<Option<T>, AppError>
where
    T: std::str::FromStr + PartialOrd,
{
    present(value)
        .map(|text| {
            text.parse::<T>()
                .ok()
                .filter(|n| range.contains(n))
                .ok_or_else(|| AppError::invalid(field, words))
        })
        .transpose()
}

/// The model options: values left empty in the form take the configuration's defaults, and say
/// so.
fn model_options(
    temperature: Option<f64>,
    max_tokens: Option<u32>,
    defaults: ModelOptions,
) -> ModelOptions {
    ModelOptions {
        temperature: temperature.or(defaults.temperature),
        max_tokens: max_tokens.or(defaults.max_tokens),
        from_configuration: [
            (
                "temperature",
                temperature.is_none() && defaults.temperature.is_some(),
            ),
            (
                "max_tokens",
                max_tokens.is_none() && defaults.max_tokens.is_some(),
            ),
        ]
        .into_iter()
        .filter(|(_, from)| *from)
        .map(|(name, _)| name.to_owned())
        .collect(),
    }
}

/// Skills as typed in the form: blocks separated by a line `---`; each block's first line is
/// its name, the rest its text.
pub fn parse_skills(text: &str) -> Result<Vec<Skill>, AppError> {
    let mut skills = Vec::new();
    for block in text
        .split("\n---")
        .map(|b| b.trim_matches(|c| c == '\n' || c == '\r' || c == '-'))
    {
        let block = block.trim();
        if block.is_empty() {
            continue;
        }
        let (name, content) = block.split_once('\n').unwrap_or((block, ""));
        if content.trim().is_empty() {
            return Err(AppError::invalid(
                "skills",
                format!("the skill `{}` has a name but no text", name.trim()),
            ));
        }
        skills.push(Skill {
            name: name.trim().to_owned(),
            content: content.trim().to_owned(),
        });
    }
    Ok(skills)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_limits_go_over_the_configurations_and_none_clears_one() {
        let defaults = Limits {
            requests: Some(10),
            cost_micros: Some(500_000),
            ..Limits::default()
        };
        let typed = FormLimits {
            requests: Some(" 3 ".into()),
            cost_usd: Some("none".into()),
            seconds: Some("90".into()),
            tool_calls: Some("".into()),
            ..FormLimits::default()
        };
        let limits = typed.over(defaults).unwrap();
        assert_eq!(limits.requests, Some(3));
        assert_eq!(limits.cost_micros, None);
        assert_eq!(limits.wall_ms, Some(90_000));
        assert_eq!(limits.tool_calls, None);
        let cost = FormLimits {
            cost_usd: Some("0.25".into()),
            ..FormLimits::default()
        };
        assert_eq!(cost.over(defaults).unwrap().cost_micros, Some(250_000));
        assert_eq!(FormLimits::default().over(defaults).unwrap(), defaults);
        for (bad, field) in [
            (
                FormLimits {
                    requests: Some("0".into()),
                    ..FormLimits::default()
                },
                "limit_requests",
            ),
            (
                FormLimits {
                    cost_usd: Some("-1".into()),
                    ..FormLimits::default()
                },
                "limit_cost_usd",
            ),
            (
                FormLimits {
                    input_tokens: Some("lots".into()),
                    ..FormLimits::default()
                },
                "limit_input_tokens",
            ),
        ] {
            assert_eq!(bad.over(defaults).unwrap_err().field(), Some(field));
        }
    }

    #[test]
    fn skills_are_blocks_with_a_name_line() {
        let skills = parse_skills("tone\nBe brief.\n---\nstyle\nUse lists.\nShort ones.").unwrap();
        assert_eq!(skills.len(), 2);
        assert_eq!(skills[1].name, "style");
        assert_eq!(skills[1].content, "Use lists.\nShort ones.");
        assert!(parse_skills("  ").unwrap().is_empty());
        let err = parse_skills("lonely name").unwrap_err();
        assert_eq!(err.field(), Some("skills"));
    }
}
