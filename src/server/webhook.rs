//! A signed webhook when a run needs a person — a decision on its calls
//! (`run.waiting_for_approval`) or an answer to its question (`run.waiting_for_input`) — the way
//! GitHub and Stripe send theirs: a JSON POST whose `X-Nrllm-Signature-256` header is `sha256=`
//! and the hex HMAC-SHA256, under the target's secret, of `<timestamp>.<body>`, with the
//! timestamp (Unix seconds) in `X-Nrllm-Timestamp`: a receiver checks the signature, and refuses
//! old timestamps so that a recorded delivery cannot be replayed later.
//!
//! Deliveries live in the database ([`WebhookStore`]): the run waiting is announced even if the
//! server stopped just after it began to wait (every waiting run without a delivery gets one), a
//! failed attempt is retried with a doubling wait, and two instances never send the same one.
//! The run page shows each delivery's state and attempts. Secrets are read from the environment
//! at start and kept only here: they are never stored, logged or shown, and neither is the URL
//! (it can carry a token of its own); the log names the configuration instead.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use nrllm_core::clock::{format_utc, now_ms};
use nrllm_core::preview::{cut, PreviewOutcome};
use nrllm_core::run_service::{PendingTurn, RunService};
use nrllm_core::run_store::{RunRecord, RunStatus, StoreError};
use nrllm_core::tool::Effect;
use nrllm_store::webhooks::{Attempt, Claimed, Delivery, DeliveryState, Unannounced, WebhookStore};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::auth::hmac_hex;
use super::outbox::{failed_attempt, keep_passing, Bell};
use crate::page_data::{ApprovalsView, WebhookView};
use crate::settings::Settings;

/// Checked for due deliveries this often even when nothing wakes the sender (retries, and runs
/// another instance suspended).
const POLL: Duration = Duration::from_secs(1);
/// One attempt may take this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// An instance holds a delivery it sends this long; a crashed sender's deliveries are free again
/// after it.
const LEASE: Duration = Duration::from_secs(60);
/// Runs that began waiting longer ago than this are not announced any more (so that turning a
/// webhook on does not announce every old waiting run).
const LOOKBACK_MS: i64 = 24 * 3_600_000;
/// Deliveries made and sent per pass.
const BATCH: u32 = 16;
/// A call's arguments are sent whole up to this size, else cut.
const MAX_ARGUMENTS_BYTES: usize = 8 * 1024;
/// A preview's summary is cut after this many characters.
const MAX_SUMMARY_CHARS: usize = 500;
/// Calls listed in one delivery (the rest are counted).
const MAX_CALLS: usize = 50;

/// Where one configuration's runs are announced. The secret never leaves this struct.
#[derive(Clone)]
pub struct Target {
    url: String,
    secret: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Target { .. }")
    }
}

/// The webhook of each configuration: its own, the settings' one, or none.
#[derive(Debug, Clone, Default)]
pub struct Targets {
    default: Option<Target>,
    /// Configurations that say otherwise (`None`: not announced).
    overrides: HashMap<String, Option<Target>>,
}

/// Reads a target's secret from the environment variable `var`.
fn target(
    url: &str,
    var: &str,
    env: &impl Fn(&str) -> Option<String>,
    whose: &str,
) -> Result<Target, String> {
    match env(var).filter(|secret| !secret.trim().is_empty()) {
        Some(secret) => Ok(Target {
            url: url.to_owned(),
            secret: secret.trim().to_owned(),
        }),
        None => Err(format!(
            "{whose} has a webhook_url: set the environment variable {var} to the secret its \
             deliveries are signed with"
        )),
    }
}

impl Targets {
    /// The targets the settings give, with their secrets from `env`. A webhook without a secret
    /// is refused: an unsigned delivery proves nothing to its receiver.
    pub fn from_settings(
        settings: &Settings,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Targets, String> {
        let default = match &settings.webhook_url {
            Some(url) => Some(target(
                url,
                &settings.webhook_secret_env,
                &env,
                "the settings",
            )?),
            None => None,
        };
        let mut overrides = HashMap::new();
        for configuration in &settings.configurations {
            let var = configuration
                .webhook_secret_env
                .as_deref()
                .unwrap_or(&settings.webhook_secret_env);
            let whose = format!("configuration `{}`", configuration.name);
            match configuration.webhook_url.as_deref() {
                Some("") => {
                    overrides.insert(configuration.name.clone(), None);
                }
                Some(url) => {
                    overrides.insert(
                        configuration.name.clone(),
                        Some(target(url, var, &env, &whose)?),
                    );
                }
                None if configuration.webhook_secret_env.is_some() => {
                    if let Some(url) = &settings.webhook_url {
                        overrides.insert(
                            configuration.name.clone(),
                            Some(target(url, var, &env, &whose)?),
                        );
                    }
                }
                None => {}
            }
        }
        Ok(Targets { default, overrides })
    }

    /// Where a run of `configuration` is announced, if anywhere.
    pub fn for_configuration(&self, configuration: &str) -> Option<&Target> {
        match self.overrides.get(configuration) {
            Some(target) => target.as_ref(),
            None => self.default.as_ref(),
        }
    }

    /// No configuration is announced anywhere.
    pub fn is_empty(&self) -> bool {
        self.default.is_none() && self.overrides.values().all(Option::is_none)
    }
}

/// `sha256=<hex>`: the signature of `body` sent at `timestamp` (Unix seconds) under `secret`.
pub fn signature(secret: &str, timestamp: i64, body: &str) -> String {
    format!(
        "sha256={}",
        hmac_hex(secret.as_bytes(), &format!("{timestamp}.{body}"))
    )
}

/// One line on what a call's preview shows.
pub(crate) fn preview_summary(outcome: &PreviewOutcome) -> Option<String> {
    match outcome {
        PreviewOutcome::None => None,
        PreviewOutcome::Unavailable(reason) => Some(format!("no preview: {reason}")),
        PreviewOutcome::Arguments(fields) => Some(format!(
            "no preview of its own; {} argument(s) shown against the tool's schema",
            fields.len()
        )),
        PreviewOutcome::Ready(preview) => Some(match &preview.effect {
            Effect::Change {
                target,
                before,
                after,
            } => format!(
                "changes {}: {} characters before, {} after",
                cut(target, 200),
                before.chars().count(),
                after.chars().count()
            ),
            Effect::Text { text } => cut(text, MAX_SUMMARY_CHARS),
        }),
    }
}

/// The event a delivery announces: what its run began to wait for.
fn event_name(status: RunStatus, counted: bool) -> &'static str {
    match status {
        RunStatus::WaitingForApproval if counted => "run.approval_counted",
        RunStatus::WaitingForInput => "run.waiting_for_input",
        RunStatus::WaitingForBudget => "run.waiting_for_budget",
        _ => "run.waiting_for_approval",
    }
}

/// The event named in a delivery's body (which this module wrote).
fn event_of(body: &str) -> String {
    #[derive(serde::Deserialize)]
    struct Head {
        event: String,
    }
    serde_json::from_str::<Head>(body)
        .map(|head| head.event)
        .unwrap_or_else(|_| event_name(RunStatus::WaitingForApproval, false).to_owned())
}

/// The JSON body announcing that `run` waits on `pending` (for a question, the pending call is
/// `ask_operator` and its arguments hold the question). A turn that needs several approvals
/// says where they stand (`approvals`); once one counted, the event is `run.approval_counted`.
pub fn body(
    run: &RunRecord,
    (pending, approvals): (&PendingTurn, Option<&ApprovalsView>),
    public_url: &str,
    waiting_days: u32,
) -> String {
    let calls: Vec<Value> = pending
        .state
        .pending
        .iter()
        .zip(&pending.previews)
        .take(MAX_CALLS)
        .map(|(call, preview)| {
            let arguments = if call.arguments.len() <= MAX_ARGUMENTS_BYTES {
                serde_json::from_str::<Value>(&call.arguments)
                    .unwrap_or_else(|_| Value::String(call.arguments.clone()))
            } else {
                Value::String(cut(&call.arguments, MAX_ARGUMENTS_BYTES / 4))
            };
            json!({
                "call_id": call.id,
                "tool": call.name,
                "arguments": arguments,
                "arguments_cut": call.arguments.len() > MAX_ARGUMENTS_BYTES,
                "gated": preview.gated,
                "preview": preview_summary(&preview.outcome),
            })
        })
        .collect();
    // The approval deadline; without one, when the purge would delete the run undecided.
    let deadline_ms = run.approval_deadline_ms.unwrap_or_else(|| {
        run.updated_at_ms
            .saturating_add(i64::from(waiting_days) * 24 * 3_600_000)
    });
    // A run at its budget: which limit stopped it, what was used, what the next action was,
    // and (a daily cap across runs) whose cap for which UTC day.
    let budget = pending.state.budget.map(|stop| {
        json!({
            "limit": stop.limit,
            "used": stop.used,
            "cap": stop.cap,
            "next": stop.next,
            "daily_cap": stop.daily.map(|daily| json!({
                "scope": daily.scope,
                "day": nrllm_core::spend::show_day(daily.day),
            })),
            "explanation": stop.explain(),
        })
    });
    let counted = approvals.is_some_and(|a| !a.approved_by.is_empty());
    let approvals = approvals.map(|approvals| {
        json!({
            "required": approvals.required,
            "approved_by": approvals.approved_by,
            "may_still_approve": approvals.may_still_approve,
            "text": approvals.text,
        })
    });
    json!({
        "event": event_name(run.status, counted),
        "run_id": run.id.to_string(),
        "configuration": run.configuration.as_ref().map(|c| c.provider.as_str()),
        "requested_by": run.requested_by,
        "waiting_since": format_utc(run.updated_at_ms),
        "waiting_since_ms": run.updated_at_ms,
        "deadline": format_utc(deadline_ms),
        "deadline_ms": deadline_ms,
        "calls": calls,
        "more_calls": pending.state.pending.len().saturating_sub(MAX_CALLS),
        "digest": pending.digest,
        "budget": budget,
        "approvals": approvals,
        "server_question": server_question(pending),
        "link": format!("{public_url}/runs/{}", run.id),
    })
    .to_string()
}

/// A question a tool's server asked while a call ran (MCP elicitation): who asks, during which
/// call, and the form; answered with `nrllm_input_answer`. `null` for the other waits.
fn server_question(pending: &PendingTurn) -> Value {
    pending.state.elicited.as_ref().map_or(Value::Null, |wait| {
        json!({
            "server": wait.asked.server,
            "call_id": wait.call_id,
            "message": wait.asked.message,
            "schema": wait.asked.schema,
            "url": wait.asked.link.as_ref().map(|link| &link.url),
            "host": wait.asked.link.as_ref().map(|link| &link.host),
            "held": wait.asked.held_until_ms.is_some(),
        })
    })
}

/// What the run page says of a delivery (`None` for one that was never meant to be sent).
pub fn delivery_view(delivery: &Delivery) -> Option<WebhookView> {
    let attempts = delivery.attempts;
    let plural = |n: i64| if n == 1 { "attempt" } else { "attempts" };
    let last = delivery.last_error.as_deref().unwrap_or("no answer");
    let text = match delivery.state {
        DeliveryState::Skipped => return None,
        DeliveryState::Pending if attempts == 0 => "webhook: sending".to_owned(),
        DeliveryState::Pending => format!(
            "webhook: attempt {attempts} failed ({last}); trying again at {}",
            format_utc(delivery.next_attempt_at_ms)
        ),
        DeliveryState::Delivered => format!(
            "webhook: delivered at {} after {attempts} {}",
            format_utc(delivery.delivered_at_ms.unwrap_or(delivery.updated_at_ms)),
            plural(attempts)
        ),
        DeliveryState::Failed => format!(
            "webhook: failed after {attempts} {} ({last}); nothing more is sent",
            plural(attempts)
        ),
        DeliveryState::Obsolete => format!(
            "webhook: not sent further after {attempts} {}: the run was decided first",
            plural(attempts)
        ),
    };
    Some(WebhookView {
        state: delivery.state.as_str().to_owned(),
        attempts,
        text,
    })
}

/// Makes and sends the deliveries.
pub struct Webhooks {
    store: WebhookStore,
    runs: Arc<RunService>,
    targets: Targets,
    client: reqwest::Client,
    bell: Arc<Bell>,
    public_url: String,
    waiting_days: u32,
    max_attempts: u32,
    backoff_ms: u32,
    /// Who may still approve a turn that needs several approvals is said from the users.
    accounts: Option<nrllm_store::accounts::AccountStore>,
}

impl Webhooks {
    /// The sender, saying who may still approve a turn that needs several approvals.
    pub fn with_accounts(mut self, accounts: nrllm_store::accounts::AccountStore) -> Webhooks {
        self.accounts = Some(accounts);
        self
    }

    /// A sender for `targets`, woken by `bell`.
    pub fn new(
        store: WebhookStore,
        runs: Arc<RunService>,
        targets: Targets,
        bell: Arc<Bell>,
        settings: &Settings,
    ) -> Result<Webhooks, String> {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            // A receiver's redirect is not followed: the delivery goes where it was configured.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!(
                "nrllm-playground-webhook/",
                env!("CARGO_PKG_VERSION")
            ))
            .build()
            .map_err(|err| format!("cannot build the webhook client: {err}"))?;
        Ok(Webhooks {
            store,
            runs,
            targets,
            client,
            bell,
            public_url: settings.public_url.clone(),
            waiting_days: settings.retention_waiting_days,
            max_attempts: settings.webhook_max_attempts,
            backoff_ms: settings.webhook_backoff_ms,
            accounts: None,
        })
    }

    /// Sends deliveries until `shutdown`: at once when a run begins to wait here, and every
    /// second for retries and runs that wait elsewhere.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        keep_passing("webhook deliveries", (POLL, &*self.bell, shutdown), || {
            self.pass()
        })
        .await;
    }

    /// One pass: a delivery for every waiting run without one, then every due delivery sent.
    pub async fn pass(&self) -> Result<(), StoreError> {
        let now = now_ms();
        for run in self.store.unannounced(now - LOOKBACK_MS, BATCH).await? {
            self.announce(&run, now).await?;
        }
        let claimed = self
            .store
            .claim_due(now, now + LEASE.as_millis() as i64, BATCH)
            .await?;
        let sent = futures::future::join_all(claimed.into_iter().map(|c| self.send(c))).await;
        sent.into_iter().collect()
    }

    async fn announce(&self, waiting: &Unannounced, now: i64) -> Result<(), StoreError> {
        let pending = match self.runs.store().get(waiting.run_id).await? {
            Some(run) if run.version == waiting.run_version => {
                self.runs.pending(&run).await.map(|p| (run, p))
            }
            _ => None,
        };
        let (state, body) = match (
            self.targets.for_configuration(&waiting.configuration),
            pending,
        ) {
            (Some(_), Some((run, pending))) => {
                let approvals = match &self.accounts {
                    Some(accounts) => {
                        super::approvals::approvals_view((accounts, &self.runs), &run, None).await?
                    }
                    None => None,
                };
                (
                    DeliveryState::Pending,
                    body(
                        &run,
                        (&pending, approvals.as_ref()),
                        &self.public_url,
                        self.waiting_days,
                    ),
                )
            }
            // No webhook for this configuration, or a state that cannot be read (the run page
            // explains that one): nothing is sent, and the run is not looked at again.
            _ => (DeliveryState::Skipped, String::new()),
        };
        self.store
            .add(waiting, &waiting.configuration, &body, state, now)
            .await?;
        Ok(())
    }

    async fn send(&self, claimed: Claimed) -> Result<(), StoreError> {
        let delivery = &claimed.delivery;
        let attempt = if !claimed.still_waiting {
            Attempt::Obsolete
        } else {
            match self.targets.for_configuration(&delivery.target) {
                None => Attempt::Failed {
                    status: None,
                    error: "no webhook is configured for this run any more".to_owned(),
                    retry_at_ms: None,
                },
                Some(target) => {
                    let (status, error) = self.post(target, delivery).await;
                    match error {
                        None => Attempt::Delivered {
                            status: status.unwrap_or_default(),
                        },
                        Some(error) => {
                            tracing::warn!(
                                delivery = %delivery.id,
                                run_id = %delivery.run_id,
                                configuration = %delivery.target,
                                attempt = delivery.attempts + 1,
                                %error,
                                "a webhook delivery failed"
                            );
                            let retries = (self.max_attempts, self.backoff_ms);
                            failed_attempt(
                                (status, error),
                                (delivery.attempts, delivery.id),
                                retries,
                            )
                        }
                    }
                }
            }
        };
        if let Attempt::Delivered { status } = &attempt {
            tracing::info!(
                delivery = %delivery.id,
                run_id = %delivery.run_id,
                configuration = %delivery.target,
                attempt = delivery.attempts + 1,
                status,
                "webhook delivered"
            );
        }
        if !self.store.record(delivery, &attempt, now_ms()).await? {
            tracing::warn!(delivery = %delivery.id, "a webhook delivery's lease ran out before its attempt was recorded");
        }
        Ok(())
    }

    /// The `traceparent` of a delivery about run `id`, when spans are exported: the run's root
    /// span (the delivery is about the run, not about a step of it).
    async fn traceparent(&self, id: uuid::Uuid) -> Option<String> {
        if !nrllm_core::spans::exporting() {
            return None;
        }
        let run = self.runs.store().get(id).await.ok().flatten()?;
        Some(run.trace?.traceparent())
    }

    /// One POST: the answer's status, and what went wrong (in our words: a receiver's body, an
    /// error's text that could hold the URL, never reach the page or the log).
    async fn post(&self, target: &Target, delivery: &Delivery) -> (Option<i64>, Option<String>) {
        let timestamp = now_ms() / 1000;
        let mut request = self.client.post(&target.url);
        if let Some(traceparent) = self.traceparent(delivery.run_id).await {
            request = request.header("traceparent", traceparent);
        }
        let response = request
            .header("content-type", "application/json")
            .header("x-nrllm-event", event_of(&delivery.body))
            .header("x-nrllm-delivery", delivery.id.to_string())
            .header("x-nrllm-timestamp", timestamp.to_string())
            .header(
                "x-nrllm-signature-256",
                signature(&target.secret, timestamp, &delivery.body),
            )
            .body(delivery.body.clone())
            .send()
            .await;
        match response {
            Ok(response) => {
                let status = response.status();
                let code = Some(i64::from(status.as_u16()));
                if status.is_success() {
                    (code, None)
                } else {
                    (code, Some(format!("HTTP {}", status.as_u16())))
                }
            }
            Err(err) if err.is_timeout() => (
                None,
                Some(format!(
                    "no answer within {} seconds",
                    REQUEST_TIMEOUT.as_secs()
                )),
            ),
            Err(err) if err.is_connect() => (None, Some("could not connect".to_owned())),
            Err(_) => (None, Some("the request failed".to_owned())),
        }
    }
}

/// A run's deliveries as the run page shows them.
pub async fn run_webhooks(
    store: &WebhookStore,
    run_id: Uuid,
) -> Result<Vec<WebhookView>, StoreError> {
    Ok(store
        .for_run(run_id)
        .await?
        .iter()
        .filter_map(delivery_view)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(text: &str) -> Settings {
        Settings::from_sources(std::path::Path::new("Leptos.toml"), Some(text), |_| None).unwrap()
    }

    #[test]
    fn each_configuration_finds_its_own_webhook_or_the_default_and_needs_a_secret() {
        let settings = settings(
            r#"
            webhook_url = "http://hooks.local/all"
            [[configurations]]
            name = "quiet"
            kind = "demo"
            model = "demo-1"
            webhook_url = ""
            [[configurations]]
            name = "own"
            kind = "demo"
            model = "demo-1"
            webhook_url = "https://hooks.local/own"
            webhook_secret_env = "OWN_SECRET"
            "#,
        );
        let env = |var: &str| match var {
            "NRLLM_WEBHOOK_SECRET" => Some("s1".to_owned()),
            "OWN_SECRET" => Some("s2".to_owned()),
            _ => None,
        };
        let targets = Targets::from_settings(&settings, env).unwrap();
        assert_eq!(
            targets.for_configuration("demo").unwrap().url,
            "http://hooks.local/all"
        );
        assert!(targets.for_configuration("quiet").is_none());
        let own = targets.for_configuration("own").unwrap();
        assert_eq!(
            (own.url.as_str(), own.secret.as_str()),
            ("https://hooks.local/own", "s2")
        );
        assert_eq!(
            format!("{own:?}"),
            "Target { .. }",
            "a secret never reaches a log"
        );

        let err = Targets::from_settings(&settings, |var: &str| {
            (var == "NRLLM_WEBHOOK_SECRET").then(|| "s1".to_owned())
        })
        .unwrap_err();
        assert!(err.contains("`own`") && err.contains("OWN_SECRET"), "{err}");
        assert!(Targets::from_settings(&Settings::default(), |_| None)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn the_signature_is_an_hmac_of_timestamp_and_body() {
        // RFC 4231 test case 2 (key "Jefe") for the HMAC itself.
        assert_eq!(
            hmac_hex(b"Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let signed = signature("Jefe", 1_700_000_000, "{}");
        assert_eq!(
            signed,
            format!("sha256={}", hmac_hex(b"Jefe", "1700000000.{}"))
        );
        assert_ne!(signed, signature("Jefe", 1_700_000_001, "{}"));
    }

    #[test]
    fn the_page_says_where_each_delivery_stands() {
        let mut delivery = Delivery {
            id: Uuid::nil(),
            run_id: Uuid::nil(),
            run_version: 2,
            target: "demo".into(),
            body: String::new(),
            state: DeliveryState::Pending,
            attempts: 2,
            next_attempt_at_ms: 0,
            lease_until_ms: 0,
            last_status: Some(500),
            last_error: Some("HTTP 500".into()),
            created_at_ms: 0,
            updated_at_ms: 0,
            delivered_at_ms: None,
        };
        let text = |d: &Delivery| delivery_view(d).map(|v| v.text);
        assert_eq!(
            text(&delivery).unwrap(),
            "webhook: attempt 2 failed (HTTP 500); trying again at 1970-01-01 00:00:00 UTC"
        );
        delivery.state = DeliveryState::Delivered;
        delivery.attempts = 3;
        assert!(text(&delivery).unwrap().ends_with("after 3 attempts"));
        delivery.state = DeliveryState::Failed;
        assert!(text(&delivery)
            .unwrap()
            .contains("failed after 3 attempts (HTTP 500)"));
        delivery.state = DeliveryState::Skipped;
        assert_eq!(text(&delivery), None);
    }
}
