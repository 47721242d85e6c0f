//! The mail telling a person that a run waits for them: what the turn would do (each call, its
//! arguments cut short, its preview's summary), by when, and the links *Approve*, *Deny* and
//! *Open*; in plain text and in HTML, every string the run supplied escaped (a model's text is
//! never markup here either). Sent through the configured SMTP server by `lettre`.

use std::time::Duration;

use lettre::message::{header::ContentType, Mailbox, MultiPart, SinglePart};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use nrllm_core::clock::format_utc;
use nrllm_core::preview::cut;
use nrllm_core::run_service::PendingTurn;
use nrllm_core::run_store::RunRecord;
use nrllm_store::notifications::Round;

use crate::page_data::ApprovalsView;
use crate::settings::notify::Mail;

/// Calls listed in one mail (the rest are counted).
const MAX_CALLS: usize = 20;
/// A call's arguments are shown up to this many characters.
const MAX_ARGUMENT_CHARS: usize = 1_000;
/// The subject names tools up to this many characters.
const MAX_SUBJECT_TOOLS_CHARS: usize = 80;
/// One attempt may take this long.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(15);

/// Where a mail's buttons go.
pub struct Links {
    pub approve: String,
    pub deny: String,
    pub open: String,
}

/// A mail, written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Content {
    pub subject: String,
    pub text: String,
    pub html: String,
}

fn escape(text: &str) -> String {
    html_escape::encode_quoted_attribute(text).into_owned()
}

/// By when to decide: the turn's deadline, or, for a turn without one, until when the links
/// work.
pub(super) fn by_when(run: &RunRecord, links_expire_ms: i64) -> String {
    match run.approval_deadline_ms {
        Some(deadline) => format!("Decide by {}.", format_utc(deadline)),
        None => format!(
            "The turn has no deadline; these links work until {}.",
            format_utc(links_expire_ms)
        ),
    }
}

/// The mail for `run` waiting on `pending`, the `round` it belongs to; its links expire at
/// `links_expire_ms`.
pub fn compose(
    run: &RunRecord,
    (pending, approvals): (&PendingTurn, Option<&ApprovalsView>),
    round: Round,
    links_expire_ms: i64,
    links: &Links,
) -> Content {
    let by_when = by_when(run, links_expire_ms);
    let short = &run.id.to_string()[..8];
    let tools: Vec<&str> = pending
        .state
        .pending
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    let lead = match round {
        Round::Waiting => "waits for your decision",
        Round::Reminder => "still waits for your decision (a reminder)",
        Round::Escalation => "has waited too long for a decision (escalated to you)",
    };
    // Header text is encoded by the mail library; control characters are dropped here anyway.
    let subject = format!(
        "Run {short} {lead}: {}",
        cut(&tools.join(", "), MAX_SUBJECT_TOOLS_CHARS)
    )
    .chars()
    .filter(|c| !c.is_control())
    .collect();
    let configuration = run
        .configuration
        .as_ref()
        .map_or("", |c| c.provider.as_str());
    let count = approvals.map(count_line).unwrap_or_default();
    let mut text = format!(
        "Run {} ({configuration}, requested by {}) {lead}.\n{by_when}\n{count}\n",
        run.id, run.requested_by
    );
    let (calls_text, items) = calls(pending);
    text.push_str(&calls_text);
    text.push_str(&format!(
        "\nApprove: {}\nDeny: {}\nOpen the run: {}\n\nEach link asks you to confirm before it \
         decides, and decides once.\n",
        links.approve, links.deny, links.open
    ));
    let html = format!(
        "<!doctype html><html><body><p>Run <strong>{}</strong> ({}, requested by {}) {lead}. \
         {}</p><p>{}</p><ul>{items}</ul><p><a href=\"{}\">Approve</a> | <a href=\"{}\">Deny</a> | \
         <a href=\"{}\">Open the run</a></p><p>Each link asks you to confirm before it decides, \
         and decides once.</p></body></html>",
        escape(&run.id.to_string()),
        escape(configuration),
        escape(&run.requested_by),
        escape(&by_when),
        escape(&count),
        escape(&links.approve),
        escape(&links.deny),
        escape(&links.open),
    );
    Content {
        subject,
        text,
        html,
    }
}

/// "This turn needs 2 approvals from different people: 1 of 2 approvals: alice. May still
/// approve: bob, carol." (a line of a mail or a Slack message).
pub(super) fn count_line(approvals: &ApprovalsView) -> String {
    let mut line = format!(
        "This turn needs {} approvals from different people: {}.",
        approvals.required, approvals.text
    );
    if !approvals.may_still_approve.is_empty() {
        line.push_str(&format!(
            " May still approve: {}.",
            approvals.may_still_approve.join(", ")
        ));
    }
    line
}

/// The turn's calls, in text and as HTML list items (escaped), at most [`MAX_CALLS`].
fn calls(pending: &PendingTurn) -> (String, String) {
    let (mut text, mut items) = (String::new(), String::new());
    for (call, preview) in pending
        .state
        .pending
        .iter()
        .zip(&pending.previews)
        .take(MAX_CALLS)
    {
        let arguments = cut(&call.arguments, MAX_ARGUMENT_CHARS);
        let summary = crate::server::webhook::preview_summary(&preview.outcome);
        let gate = if preview.gated {
            "waits for approval"
        } else {
            "runs with the turn"
        };
        text.push_str(&format!(
            "- {} ({gate})\n  arguments: {arguments}\n",
            call.name
        ));
        items.push_str(&format!(
            "<li><strong>{}</strong> ({gate})<br><code>{}</code>",
            escape(&call.name),
            escape(&arguments)
        ));
        if let Some(summary) = &summary {
            text.push_str(&format!("  preview: {summary}\n"));
            items.push_str(&format!("<br>preview: {}", escape(summary)));
        }
        items.push_str("</li>");
    }
    let more = pending.state.pending.len().saturating_sub(MAX_CALLS);
    if more > 0 {
        let line = format!("... and {more} more call(s): open the run to see them.");
        text.push_str(&format!("{line}\n"));
        items.push_str(&format!("<li>{line}</li>"));
    }
    (text, items)
}

/// Sends mail through the configured SMTP server.
pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
}

impl Mailer {
    /// A mailer for `mail`, logging in with the user the URL names and `password` (from the
    /// environment) if both are there.
    pub fn new(mail: &Mail, password: Option<String>) -> Result<Mailer, String> {
        let from: Mailbox = mail
            .from
            .parse()
            .map_err(|err| format!("mail_from `{}` is not a sender: {err}", mail.from))?;
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::from_url(&mail.smtp_url)
            .map_err(|err| format!("smtp_url cannot be used: {err}"))?
            .timeout(Some(SEND_TIMEOUT));
        if let Some(password) = password {
            let user = mail
                .smtp_url
                .split_once("://")
                .and_then(|(_, rest)| rest.split_once('@'))
                .map(|(user, _)| user.split(':').next().unwrap_or(user).to_owned())
                .unwrap_or_default();
            builder = builder.credentials(
                lettre::transport::smtp::authentication::Credentials::new(user, password),
            );
        }
        Ok(Mailer {
            transport: builder.build(),
            from,
        })
    }

    /// Sends `content` to `to`; on failure, what went wrong in words for the run page (the
    /// server's own answer goes to the log).
    pub async fn send(&self, to: &str, content: &Content) -> Result<(), String> {
        let to: Mailbox = to
            .parse()
            .map_err(|_| "the user's email address is not one the mail library takes".to_owned())?;
        let message = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(content.subject.clone())
            .multipart(
                MultiPart::alternative()
                    .singlepart(
                        SinglePart::builder()
                            .header(ContentType::TEXT_PLAIN)
                            .body(content.text.clone()),
                    )
                    .singlepart(
                        SinglePart::builder()
                            .header(ContentType::TEXT_HTML)
                            .body(content.html.clone()),
                    ),
            )
            .map_err(|err| {
                tracing::warn!(%err, "a notification mail could not be written");
                "the mail could not be written".to_owned()
            })?;
        self.transport
            .send(message)
            .await
            .map(|_| ())
            .map_err(|err| {
                tracing::warn!(%err, "a notification mail was not sent");
                if err.is_permanent() {
                    "the mail server refused the mail".to_owned()
                } else if err.is_transient() {
                    "the mail server put the mail off (try again later)".to_owned()
                } else if err.is_timeout() {
                    format!(
                        "the mail server did not answer within {} seconds",
                        SEND_TIMEOUT.as_secs()
                    )
                } else {
                    "could not reach the mail server".to_owned()
                }
            })
    }
}
