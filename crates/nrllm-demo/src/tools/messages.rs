//! Messages: the outbox, and sending (internal addresses are allowed by the tool's own check).

use super::common::*;
use crate::site::SiteStore;
use async_trait::async_trait;
use nrllm_core::tool::{Preview, Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// The outbox's messages.
pub struct ListOutbox(pub SiteStore);

#[async_trait]
impl Tool for ListOutbox {
    type Args = LimitArgs;
    const NAME: &'static str = "list_outbox";
    const DESCRIPTION: &'static str = "List the messages in the outbox, newest first.";
    const GROUP: &'static str = GROUP_SITE;

    async fn call(&self, args: LimitArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let messages = self
            .0
            .outbox(args.limit.unwrap_or(10))
            .await
            .map_err(site_error)?;
        let list: Vec<_> = messages
            .iter()
            .map(|m| json!({"to": m.recipient, "subject": m.subject, "body": m.body, "run_id": m.run_id}))
            .collect();
        Ok(json!({ "messages": list }).to_string())
    }
}

/// The team's own mail domain: `send_message` to an address there needs no approval.
pub const INTERNAL_DOMAIN: &str = "internal.example";

/// Slugs of scratch pages begin with this: `create_page` of one needs no approval.
pub const SCRATCH_PREFIX: &str = "scratch-";

/// Whether `to` is one address at [`INTERNAL_DOMAIN`] (case ignored; nothing else around it):
/// exactly one `@`, a local part of letters, digits and `. _ + -`, and no space, control
/// character, list separator or bracket anywhere — `a@evil.com@internal.example` and an address
/// with a line break in it are not internal.
pub fn is_internal_address(to: &str) -> bool {
    let to = to.trim();
    let mut parts = to.split('@');
    let (Some(local), Some(domain), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    !local.is_empty()
        && local
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'))
        && domain.eq_ignore_ascii_case(INTERNAL_DOMAIN)
}

/// Arguments of `send_message`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessageArgs {
    /// Who the message is for (a name or an address).
    #[schemars(length(min = 1, max = 200))]
    pub to: String,
    /// The subject line.
    #[schemars(length(min = 1, max = 200))]
    pub subject: String,
    /// The message.
    #[schemars(length(min = 1, max = 5000))]
    pub body: String,
}

/// A message as the operator sees it before it is sent.
pub(super) fn message_text(args: &SendMessageArgs) -> String {
    format!(
        "To: {}\nSubject: {}\n\n{}",
        args.to, args.subject, args.body
    )
}

/// The basis of a message preview: a hash of the text the operator read.
pub(super) fn message_basis(text: &str) -> String {
    format!(
        "message:{}",
        nrllm_core::hash::short_hash([text.as_bytes()], 8)
    )
}

/// Writes a message to the outbox (nothing leaves the machine).
pub struct SendMessage(pub SiteStore);

#[async_trait]
impl Tool for SendMessage {
    type Args = SendMessageArgs;
    const NAME: &'static str = "send_message";
    const DESCRIPTION: &'static str = "Send a message (it is put in the outbox).";
    const GROUP: &'static str = GROUP_SITE;
    // A message to the team's own domain goes out at once; anyone else's waits for approval.
    const APPROVAL_PER_CALL: bool = true;
    // The site applies each keyed change at most once (in the change's own transaction).
    const IDEMPOTENT_BY_KEY: bool = true;

    fn needs_approval(&self, args: &SendMessageArgs) -> bool {
        !is_internal_address(&args.to)
    }

    async fn call(&self, args: SendMessageArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let approved = ctx.approved_basis.as_deref();
        if approved.is_some_and(|basis| basis.starts_with("message:"))
            && approved != Some(message_basis(&message_text(&args)).as_str())
        {
            return Err(ToolError::Refused(
                "the message differs from the one the operator approved; nothing was sent".into(),
            ));
        }
        self.0
            .send_message(
                (&args.to, &args.subject, &args.body),
                &author(ctx),
                |message| {
                    format!(
                        "Message #{} to {} queued in the outbox: \"{}\".",
                        message.id, message.recipient, message.subject
                    )
                },
            )
            .await
            .map_err(site_error)
    }

    async fn preview(
        &self,
        args: SendMessageArgs,
        _ctx: &ToolContext,
    ) -> Result<Option<Preview>, ToolError> {
        let text = message_text(&args);
        let basis = message_basis(&text);
        Ok(Some(Preview::text(text).with_basis(basis)))
    }
}
