//! Tools: what the model can call. A tool is a Rust type with an argument type; its JSON Schema is
//! derived from that type (schemars), and arguments are validated against the schema before the
//! tool runs. A tool that has side effects opts into human approval with one line:
//! `const REQUIRES_APPROVAL: bool = true;` — the Rust counterpart of ADR-084's empty marker
//! interface. Tools that don't say so are untouched.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a tool knows about the run that calls it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolContext {
    /// The run's id (empty when a tool is called outside a persisted run).
    pub run_id: String,
    /// Who asked for this execution: the run's requester, or the operator who approved it.
    pub actor: String,
    /// The id of the tool call being executed.
    pub call_id: String,
    /// The [`Preview::basis`] the operator approved this call against, if any. A tool whose
    /// target no longer has this basis must refuse to write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_basis: Option<String>,
    /// For a call that runs on an operator's approval: the key of its effect. Running the call
    /// again with the same key (after a restart) must apply the effect at most once; a tool that
    /// guarantees that declares [`Tool::IDEMPOTENT_BY_KEY`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect_key: Option<String>,
    /// The run's version while the instance calling the tool holds it ([`crate::lease`]): a
    /// tool that writes in the run's own database refuses, in its transaction, when the run is
    /// no longer at this version (another instance took it over).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_epoch: Option<i64>,
    /// Where the call's progress goes while it runs (the run's live views; none: nowhere).
    #[serde(skip)]
    pub progress: Option<CallProgress>,
    /// The operator's reply to what the call's server asked when the call was sent before
    /// ([`ToolError::Asks`]): the call is sent again with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<crate::elicit::Replied>,
}

/// The longest progress message kept (a tool's or a server's text).
pub const MAX_PROGRESS_MESSAGE: usize = 200;

/// How far a running call has come, as its tool reports it (an MCP server's progress
/// notifications): shown live, never journaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    pub progress: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Progress {
    /// A report as a tool (or a server) gave it, made safe to show: numbers that are not finite
    /// are dropped (`None`: nothing to show), the message is cut to [`MAX_PROGRESS_MESSAGE`]
    /// characters and loses its control characters.
    pub fn bounded(progress: f64, total: Option<f64>, message: Option<&str>) -> Option<Progress> {
        if !progress.is_finite() {
            return None;
        }
        let message = message.map(|text| {
            text.chars()
                .filter(|c| !c.is_control())
                .take(MAX_PROGRESS_MESSAGE)
                .collect::<String>()
        });
        Some(Progress {
            progress,
            total: total.filter(|t| t.is_finite() && *t > 0.0),
            message: message.filter(|m| !m.is_empty()),
        })
    }
}

/// What a run does with its calls' progress: told the call's id, its tool, and the report.
type ProgressFn = dyn Fn(&str, &str, &Progress) + Send + Sync;

/// Where the progress of a run's calls goes (the run service hands the loop one per segment).
#[derive(Clone)]
pub struct ProgressHook(Arc<ProgressFn>);

impl ProgressHook {
    pub fn new(report: impl Fn(&str, &str, &Progress) + Send + Sync + 'static) -> ProgressHook {
        ProgressHook(Arc::new(report))
    }

    /// The hook for one call: what its tool reports goes here.
    pub fn for_call(&self, call_id: &str, tool: &str) -> CallProgress {
        CallProgress {
            hook: self.clone(),
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
        }
    }
}

impl std::fmt::Debug for ProgressHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressHook")
    }
}

impl PartialEq for ProgressHook {
    fn eq(&self, other: &ProgressHook) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Where one running call's progress goes.
#[derive(Clone, Debug, PartialEq)]
pub struct CallProgress {
    hook: ProgressHook,
    call_id: String,
    tool: String,
}

impl Eq for CallProgress {}

impl CallProgress {
    /// Tells the run's live views how far the call has come.
    pub fn report(&self, progress: &Progress) {
        (self.hook.0)(&self.call_id, &self.tool, progress);
    }
}

/// A tool's description as offered to the model and shown to operators.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
    /// The group the tool is listed and enabled under (`site`, `system`, `runs`, …).
    pub group: String,
    pub enabled_by_default: bool,
    /// Offered only to runs started by an administrator.
    pub admin_only: bool,
    /// Calls to this tool may suspend the run until an operator decides: every call, or (with
    /// `approval_per_call`) the calls whose arguments the tool says need it.
    pub requires_approval: bool,
    /// Whether a call needs approval depends on its arguments ([`Tool::needs_approval`]).
    #[serde(default)]
    pub approval_per_call: bool,
    /// Running a call again with the same effect key applies its effect at most once.
    #[serde(default)]
    pub idempotent_by_key: bool,
    /// Calls are questions an operator answers (`ask_operator`): the run waits for input.
    #[serde(default)]
    pub asks_operator: bool,
}

/// What an approved call would do, shown in the approval panel before anyone decides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preview {
    pub effect: Effect,
    /// The state of the target the effect was computed from (for a page: its content's version),
    /// when the effect depends on one. It is part of the digest the operator decides on, and the
    /// tool checks it again before it writes ([`ToolContext::approved_basis`]): a decision never
    /// applies to a target that changed after the operator looked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basis: Option<String>,
}

/// The effect a preview shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Effect {
    /// A change to a text thing: before and after, for a diff.
    Change {
        target: String,
        before: String,
        after: String,
    },
    /// A plain description of the effect.
    Text { text: String },
}

impl Preview {
    /// A before/after change of `target`.
    pub fn change(
        target: impl Into<String>,
        before: impl Into<String>,
        after: impl Into<String>,
    ) -> Preview {
        Preview {
            effect: Effect::Change {
                target: target.into(),
                before: before.into(),
                after: after.into(),
            },
            basis: None,
        }
    }

    /// A plain description of the effect.
    pub fn text(text: impl Into<String>) -> Preview {
        Preview {
            effect: Effect::Text { text: text.into() },
            basis: None,
        }
    }

    /// The same preview, computed from `basis`.
    pub fn with_basis(mut self, basis: impl Into<String>) -> Preview {
        self.basis = Some(basis.into());
        self
    }
}

/// Why a tool call produced no normal result. The model only ever sees [`ToolError::model_text`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not fit the schema; `field` names where.
    #[error("invalid arguments: {field}: {message}")]
    InvalidArguments { field: String, message: String },
    /// The tool refused for a reason the model may read (not found, already exists, …).
    #[error("{0}")]
    Refused(String),
    /// The tool failed internally; the detail is logged, never shown to the model.
    #[error("internal failure: {0}")]
    Internal(String),
    /// The tool's server needs the operator's input before the call can finish
    /// ([`crate::elicit`]): the run waits for it, then sends the call again with the reply.
    #[error("the server asks: {}", .0.message)]
    Asks(Box<crate::elicit::Asked>),
}

impl ToolError {
    /// An internal failure with its cause (logged, not shown).
    pub fn internal(cause: impl std::fmt::Display) -> ToolError {
        ToolError::Internal(cause.to_string())
    }

    /// The `Error:` result the model reads. Internal detail is left out.
    pub fn model_text(&self) -> String {
        match self {
            ToolError::InvalidArguments { field, message } => {
                format!("Error: invalid arguments: {field}: {message}")
            }
            ToolError::Refused(reason) => format!("Error: {reason}"),
            ToolError::Internal(_) => {
                "Error: the tool failed; the details are in the server log.".to_owned()
            }
            // The loop waits for the operator instead; a model never reads this.
            ToolError::Asks(_) => "Error: the tool's server asked for input.".to_owned(),
        }
    }
}

/// A tool, written against its own argument type.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The arguments; their JSON Schema is what the model is offered.
    type Args: DeserializeOwned + JsonSchema + Send + Sync;

    /// Unique name the model calls the tool by.
    const NAME: &'static str;
    /// What the tool does, for the model and for operators.
    const DESCRIPTION: &'static str;
    /// Listing and enable/disable group.
    const GROUP: &'static str = "general";
    /// Whether a fresh installation enables the tool.
    const ENABLED_BY_DEFAULT: bool = true;
    /// Offered only to administrators' runs.
    const ADMIN_ONLY: bool = false;
    /// The opt-in: `true` makes every call to this tool wait for an operator's approval.
    const REQUIRES_APPROVAL: bool = false;
    /// `true` if the tool decides per call, from the arguments, whether the call needs approval
    /// ([`Tool::needs_approval`]); its calls have effects, so those that pass are journaled like
    /// approved ones.
    const APPROVAL_PER_CALL: bool = false;
    /// `true` for a tool whose calls an operator answers instead of the tool running
    /// ([`crate::question::AskOperator`]).
    const ASKS_OPERATOR: bool = false;
    /// `true` if the tool applies a call's effect at most once per [`ToolContext::effect_key`],
    /// returning the first result when called again. A call of such a tool that a restart cut
    /// off is simply run again; any other one waits for an operator ("outcome unknown").
    const IDEMPOTENT_BY_KEY: bool = false;

    /// Whether a call with these arguments must wait for an operator. Pure: it reads only the
    /// arguments (a tool with [`Tool::APPROVAL_PER_CALL`] overrides it). ADR-084's whole-turn rule
    /// still holds: one call of a turn that needs approval holds the whole turn.
    fn needs_approval(&self, _args: &Self::Args) -> bool {
        Self::REQUIRES_APPROVAL
    }

    /// Runs the tool. `Ok` is the result text; `Err` becomes an `Error:` result.
    async fn call(&self, args: Self::Args, ctx: &ToolContext) -> Result<String, ToolError>;

    /// What a call with these arguments would do, for the approval panel. Tools without
    /// side effects need not say.
    async fn preview(
        &self,
        _args: Self::Args,
        _ctx: &ToolContext,
    ) -> Result<Option<Preview>, ToolError> {
        Ok(None)
    }
}

/// The object-safe face of a [`Tool`], used by the registry and the loop: arguments as JSON,
/// validated against the derived schema before the tool sees them.
#[async_trait]
pub trait DynTool: Send + Sync {
    /// The tool's spec.
    fn spec(&self) -> &ToolSpec;
    /// Checks arguments against the schema and decodes them.
    fn check_arguments(&self, args: &Value) -> Result<(), ToolError>;
    /// Whether a call with these arguments must wait for an operator. Arguments that do not fit
    /// the schema need approval if the tool may ever need it (the operator sees them).
    fn needs_approval(&self, args: &Value) -> bool;
    /// Validates and runs.
    async fn execute(&self, args: &Value, ctx: &ToolContext) -> Result<String, ToolError>;
    /// Validates and previews.
    async fn preview(&self, args: &Value, ctx: &ToolContext) -> Result<Option<Preview>, ToolError>;
    /// Why a call of this tool, which has effects, went ahead without an operator: the tool's
    /// own check of the arguments let it through (or a policy the tool carries did).
    fn passed_note(&self) -> String {
        format!(
            "no approval needed: {} lets these arguments through by its own check",
            self.spec().name
        )
    }
}

/// Wraps a [`Tool`] with its spec and compiled schema.
pub(crate) struct TypedTool<T: Tool> {
    tool: T,
    spec: ToolSpec,
    validator: ArgumentValidator,
}

impl<T: Tool> TypedTool<T> {
    pub(crate) fn erase(tool: T) -> Arc<dyn DynTool> {
        let parameters = schema_of::<T::Args>();
        let validator = ArgumentValidator::new(&parameters);
        Arc::new(TypedTool {
            tool,
            spec: ToolSpec {
                name: T::NAME.to_owned(),
                description: T::DESCRIPTION.to_owned(),
                parameters,
                group: T::GROUP.to_owned(),
                enabled_by_default: T::ENABLED_BY_DEFAULT,
                admin_only: T::ADMIN_ONLY,
                requires_approval: T::REQUIRES_APPROVAL || T::APPROVAL_PER_CALL,
                approval_per_call: T::APPROVAL_PER_CALL,
                idempotent_by_key: T::IDEMPOTENT_BY_KEY,
                asks_operator: T::ASKS_OPERATOR,
            },
            validator,
        })
    }

    fn decode(&self, args: &Value) -> Result<T::Args, ToolError> {
        self.validator.check(args)?;
        serde_json::from_value(args.clone()).map_err(|err| ToolError::InvalidArguments {
            field: "arguments".to_owned(),
            message: err.to_string(),
        })
    }
}

#[async_trait]
impl<T: Tool> DynTool for TypedTool<T> {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn check_arguments(&self, args: &Value) -> Result<(), ToolError> {
        self.decode(args).map(|_| ())
    }

    fn needs_approval(&self, args: &Value) -> bool {
        if !self.spec.requires_approval {
            return false;
        }
        match self.decode(args) {
            Ok(args) => self.tool.needs_approval(&args),
            Err(_) => true,
        }
    }

    async fn execute(&self, args: &Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let args = self.decode(args)?;
        self.tool.call(args, ctx).await
    }

    async fn preview(&self, args: &Value, ctx: &ToolContext) -> Result<Option<Preview>, ToolError> {
        let args = self.decode(args)?;
        self.tool.preview(args, ctx).await
    }
}

/// The JSON Schema of `A`, as offered to providers (without the `$schema` meta key).
pub fn schema_of<A: JsonSchema>() -> Value {
    let mut schema = schemars::schema_for!(A).to_value();
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
        object.remove("title");
        // Providers expect an object schema even for tools without arguments.
        object
            .entry("type")
            .or_insert_with(|| Value::from("object"));
        if object.get("type") == Some(&Value::from("object")) {
            object
                .entry("properties")
                .or_insert_with(|| Value::Object(Default::default()));
        }
    }
    schema
}

/// A compiled JSON Schema for a tool's arguments.
pub struct ArgumentValidator {
    validator: Option<jsonschema::Validator>,
}

impl ArgumentValidator {
    /// Compiles `schema`. A schema that does not compile checks nothing (logged): the tool
    /// checks its arguments itself.
    pub fn new(schema: &Value) -> ArgumentValidator {
        let validator = match jsonschema::validator_for(schema) {
            Ok(validator) => Some(validator),
            Err(err) => {
                // A derived schema always compiles; if one ever does not, serde still checks.
                tracing::error!(%err, "a tool's argument schema does not compile");
                None
            }
        };
        ArgumentValidator { validator }
    }

    /// `Ok` when `args` fits the schema; otherwise the first problem, naming the field.
    pub fn check(&self, args: &Value) -> Result<(), ToolError> {
        let Some(validator) = &self.validator else {
            return Ok(());
        };
        let Some(error) = validator.iter_errors(args).next() else {
            return Ok(());
        };
        Err(ToolError::InvalidArguments {
            field: field_of(&error, "arguments"),
            message: error.to_string(),
        })
    }
}

/// The field a schema validation error is about (`a.b`), or `whole` when it is about the whole
/// value.
pub(crate) fn field_of(error: &jsonschema::ValidationError<'_>, whole: &str) -> String {
    let path = error
        .instance_path()
        .as_str()
        .trim_start_matches('/')
        .replace('/', ".");
    let within = |name: &str| {
        if path.is_empty() {
            name.to_owned()
        } else {
            format!("{path}.{name}")
        }
    };
    match error.kind() {
        jsonschema::error::ValidationErrorKind::Required { property } => within(
            &property
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| property.to_string()),
        ),
        jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected }
            if !unexpected.is_empty() =>
        {
            within(&unexpected[0])
        }
        _ if path.is_empty() => whole.to_owned(),
        _ => path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Arguments of the test tools.
    #[derive(Debug, Deserialize, JsonSchema)]
    pub struct SlugArgs {
        /// The page's slug.
        pub slug: String,
    }

    struct Echo;

    #[async_trait]
    impl Tool for Echo {
        type Args = SlugArgs;
        const NAME: &'static str = "echo";
        const DESCRIPTION: &'static str = "Echoes the slug.";

        async fn call(&self, args: SlugArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
            if args.slug == "boom" {
                return Err(ToolError::internal("disk on fire at /var/secret"));
            }
            Ok(format!("slug={}", args.slug))
        }
    }

    #[test]
    fn the_schema_is_derived_from_the_argument_type() {
        let tool = TypedTool::erase(Echo);
        let schema = &tool.spec().parameters;
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["slug"]));
        assert_eq!(
            schema["properties"]["slug"]["description"],
            "The page's slug."
        );
        assert!(schema.get("$schema").is_none());
        assert!(!tool.spec().requires_approval);
    }

    #[tokio::test]
    async fn invalid_arguments_name_the_field_and_never_reach_the_tool() {
        let tool = TypedTool::erase(Echo);
        let ctx = ToolContext::default();
        let missing = tool.execute(&json!({}), &ctx).await.unwrap_err();
        assert!(
            matches!(&missing, ToolError::InvalidArguments { field, .. } if field == "slug"),
            "{missing:?}"
        );
        let wrong_type = tool.execute(&json!({"slug": 7}), &ctx).await.unwrap_err();
        assert!(
            matches!(&wrong_type, ToolError::InvalidArguments { field, .. } if field == "slug"),
            "{wrong_type:?}"
        );
        assert!(wrong_type
            .model_text()
            .starts_with("Error: invalid arguments: slug"));
        assert_eq!(
            tool.execute(&json!({"slug": "home"}), &ctx).await.unwrap(),
            "slug=home"
        );
    }

    #[tokio::test]
    async fn internal_failures_hide_their_detail_from_the_model() {
        let tool = TypedTool::erase(Echo);
        let err = tool
            .execute(&json!({"slug": "boom"}), &ToolContext::default())
            .await
            .unwrap_err();
        let text = err.model_text();
        assert!(text.starts_with("Error:"));
        assert!(!text.contains("/var/secret"), "{text}");
    }
}
