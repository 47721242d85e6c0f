//! The notification outbox and people's addresses on both backends: a round of a waiting turn
//! is written once however many instances race for it, each notification is held by one sender
//! at a time, a posted message of a decided turn is found to be updated once, a decision link
//! decides once, a mailed offer counts only for its recipient and until it expires, and a
//! Slack identity is one user's.

use std::sync::Arc;

use nrllm_core::authority::{Actor, Refusal};
use nrllm_core::clock::now_ms;
use nrllm_core::moves::BulkVerdict;
use nrllm_core::offer::{Channel, Offer};
use nrllm_core::registry::ToolRegistry;
use nrllm_core::run_service::{LoopFactory, ResumeError, RunService, SingleLoop};
use nrllm_core::run_store::{RunConfiguration, RunReader, RunStatus};
use nrllm_core::testing::{call_turn, probe_registry, usage, Probe, ScriptedProvider};
use nrllm_core::{RunSettings, ToolLoop};
use nrllm_store::accounts::{AccountError, AccountStore};
use nrllm_store::contacts::{Contact, ContactStore, SlackId};
use nrllm_store::notifications::{NewNotification, NotificationStore, Round};
use nrllm_store::testing::backends;
use nrllm_store::webhooks::{Attempt, DeliveryState};
use nrllm_store::SqlRunStore;
use nrllm_types::Role;
use serde_json::json;

fn configuration() -> RunConfiguration {
    RunConfiguration {
        continues: None,
        approval_timeout_ms: None,
        provider: "scripted".into(),
        model: "script".into(),
        prompt: "write".into(),
        system_prompt: None,
        skills: Vec::new(),
        settings: RunSettings::default(),
    }
}

/// A run service whose runs wait on one gated call each, then finish.
fn service(store: Arc<SqlRunStore>, turns: usize) -> (RunService, Probe) {
    let mut script = Vec::new();
    for n in 0..turns {
        script.push(call_turn(
            &format!("c{n}"),
            "write_note",
            json!({"text": "a"}),
            usage(1, 1),
        ));
        script.push(nrllm_core::provider::ChatResponse::text(
            "done",
            usage(1, 1),
        ));
    }
    let probe = Probe::default();
    let registry: Arc<ToolRegistry> = Arc::new(probe_registry(&probe));
    let tool_loop = Arc::new(ToolLoop::new(
        Arc::new(ScriptedProvider::new(script)),
        registry,
    ));
    let loops: Arc<dyn LoopFactory> = Arc::new(SingleLoop(tool_loop));
    (RunService::new(store, loops), probe)
}

fn mail_to(name: &str) -> NewNotification {
    NewNotification {
        channel: Channel::Email,
        recipient: name.to_owned(),
        address: format!("{name}@example.com"),
    }
}

#[tokio::test]
async fn each_round_is_written_once_and_each_notification_sent_by_one_holder() {
    for db in backends().await {
        let store = Arc::new(SqlRunStore::new(db.db.clone()));
        let (service, _) = service(store.clone(), 1);
        let notes = NotificationStore::new(db.db.clone());
        let now = now_ms();
        let run = service.start(configuration(), "alice").await.unwrap();
        let window = (now - 60_000, now + 60_000);

        let due = notes
            .due("scripted", Round::Waiting, window, 10)
            .await
            .unwrap();
        assert_eq!(due.len(), 1, "{}", db.name);
        assert_eq!(due[0].run_id, run.id);
        assert!(notes
            .due("other", Round::Waiting, window, 10)
            .await
            .unwrap()
            .is_empty());
        // A reminder is not due before its time.
        assert!(notes
            .due(
                "scripted",
                Round::Reminder,
                (now - 60_000, now - 30_000),
                10
            )
            .await
            .unwrap()
            .is_empty());

        // Eight instances race to write the round: one does, with its notifications.
        let people = [mail_to("bob"), mail_to("carol")];
        let writes = futures::future::join_all(
            (0..8).map(|_| notes.add_round(&due[0], Round::Waiting, &people, now)),
        )
        .await;
        let written = writes.into_iter().filter(|w| *w.as_ref().unwrap()).count();
        assert_eq!(written, 1, "{}: one writer", db.name);
        assert!(notes
            .due("scripted", Round::Waiting, window, 10)
            .await
            .unwrap()
            .is_empty());
        assert_eq!(notes.for_run(run.id).await.unwrap().len(), 2);
        // The reminder is a round of its own.
        assert!(notes
            .add_round(&due[0], Round::Reminder, &people[..1], now)
            .await
            .unwrap());
        assert_eq!(notes.for_run(run.id).await.unwrap().len(), 3);

        // Two senders: each notification is held by one of them.
        let (a, b) = tokio::join!(
            notes.claim_due(now, now + 60_000, 10),
            notes.claim_due(now, now + 60_001, 10)
        );
        let claimed: Vec<_> = a.unwrap().into_iter().chain(b.unwrap()).collect();
        assert_eq!(claimed.len(), 3, "{}", db.name);
        let mut ids: Vec<_> = claimed.iter().map(|c| c.notification.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 3, "{}: each once", db.name);
        assert!(claimed.iter().all(|c| c.still_waiting));

        // A failure is retried later; a delivery keeps what the channel calls the message.
        let first = &claimed[0].notification;
        let failed = Attempt::Failed {
            status: None,
            error: "could not reach the mail server".into(),
            retry_at_ms: Some(now + 1_000),
        };
        assert!(notes.record(first, &failed, None, now).await.unwrap());
        assert!(
            !notes.record(first, &failed, None, now).await.unwrap(),
            "the lease was given back"
        );
        // A failing mail server shows on /system while a notification retries.
        let failing = notes.health(now - 1).await.unwrap();
        assert_eq!((failing.pending, failing.retrying), (3, 1), "{}", db.name);
        assert_eq!(
            failing.last_error.map(|(e, _)| e).as_deref(),
            Some("could not reach the mail server")
        );
        let again = notes
            .claim_due(now + 1_000, now + 61_000, 10)
            .await
            .unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].notification.attempts, 1);
        let posted = &again[0].notification;
        assert!(notes
            .record(
                posted,
                &Attempt::Delivered { status: 200 },
                Some("C1 1700.1"),
                now
            )
            .await
            .unwrap());
        let health = notes.health(now - 1).await.unwrap();
        assert_eq!((health.pending, health.delivered), (2, 1), "{}", db.name);
        assert_eq!(
            health.last_error, None,
            "delivered at last: nothing fails now"
        );

        // Nothing to update while the turn waits; once it is decided, the posted message once.
        assert!(notes.to_close(10).await.unwrap().is_empty());
        service
            .claim(
                run.id,
                &nrllm_core::Decision::ApproveAll,
                &Actor::user("bob", Role::Approver),
                None,
            )
            .await
            .unwrap();
        let to_close = notes.to_close(10).await.unwrap();
        assert_eq!(to_close.len(), 1, "{}", db.name);
        assert_eq!(to_close[0].message_ref.as_deref(), Some("C1 1700.1"));
        assert!(notes.close(to_close[0].id, now).await.unwrap());
        assert!(!notes.close(to_close[0].id, now).await.unwrap());
        assert!(notes.to_close(10).await.unwrap().is_empty());
        // The others are seen as obsolete by their sender.
        let later = notes
            .claim_due(now + 10_000_000, now + 10_060_000, 10)
            .await
            .unwrap();
        assert!(later.iter().all(|c| !c.still_waiting), "{}", db.name);
        let obsolete = later.first().unwrap();
        assert!(notes
            .record(&obsolete.notification, &Attempt::Obsolete, None, now)
            .await
            .unwrap());
        let states: Vec<_> = notes
            .for_run(run.id)
            .await
            .unwrap()
            .iter()
            .map(|n| n.state)
            .collect();
        assert!(states.contains(&DeliveryState::Obsolete));
    }
}

#[tokio::test]
async fn a_mailed_offer_counts_once_for_its_recipient_until_it_expires() {
    for db in backends().await {
        let store = Arc::new(SqlRunStore::new(db.db.clone()));
        let (service, probe) = service(store.clone(), 2);
        let notes = NotificationStore::new(db.db.clone());
        let run = service.start(configuration(), "alice").await.unwrap();
        let digest = service.pending(&run).await.unwrap().digest;
        let offer = |to: &str, expires_at_ms| Offer {
            channel: Channel::Email,
            verdict: BulkVerdict::ApproveAll,
            recipient: Some(to.to_owned()),
            expires_at_ms,
        };
        let bob = Actor::user("bob", Role::Approver);
        let carol = Actor::user("carol", Role::Admin);

        // Someone else's link decides nothing, whatever their role.
        let err = service
            .claim_offer(run.id, &offer("bob", i64::MAX), &carol, &digest)
            .await
            .err()
            .unwrap();
        assert!(
            matches!(&err, ResumeError::Refused(Refusal::NotRecipient { sent_to, who }) if sent_to == "bob" && who == "carol"),
            "{}: {err}",
            db.name
        );
        // An expired link decides nothing.
        let err = service
            .claim_offer(run.id, &offer("bob", now_ms() - 1), &bob, &digest)
            .await
            .err()
            .unwrap();
        assert!(matches!(err, ResumeError::OfferExpired(_)), "{err}");
        // A link for another turn decides nothing.
        let err = service
            .claim_offer(run.id, &offer("bob", i64::MAX), &bob, "not-the-digest")
            .await
            .err()
            .unwrap();
        assert!(matches!(err, ResumeError::Stale), "{err}");
        assert_eq!(
            store.get(run.id).await.unwrap().unwrap().status,
            RunStatus::WaitingForApproval
        );

        // Its recipient decides, once.
        service
            .claim_offer(run.id, &offer("bob", i64::MAX), &bob, &digest)
            .await
            .unwrap();
        assert!(notes.use_link("link-1", run.id, "bob", 5).await.unwrap());
        assert!(!notes.use_link("link-1", run.id, "bob", 6).await.unwrap());
        assert_eq!(
            notes.link_use("link-1").await.unwrap().unwrap().used_by,
            "bob"
        );
        assert_eq!(notes.link_use("link-2").await.unwrap(), None);
        let again = service
            .claim_offer(run.id, &offer("bob", i64::MAX), &bob, &digest)
            .await
            .err()
            .unwrap();
        assert!(matches!(again, ResumeError::NotWaiting(_)), "{again}");
        let decided = store.get(run.id).await.unwrap().unwrap();
        assert_eq!(decided.decided_by.as_deref(), Some("bob"));
        assert!(probe.calls().is_empty(), "queued, not carried out here");
    }
}

#[tokio::test]
async fn a_slack_identity_is_one_user_s_and_a_locked_out_user_is_nobody() {
    for db in backends().await {
        let accounts = AccountStore::new(db.db.clone());
        let contacts = ContactStore::new(db.db.clone());
        for (name, role) in [("bob", Role::Approver), ("carol", Role::Viewer)] {
            accounts.create_user(name, None, role, 1).await.unwrap();
        }
        let slack = SlackId {
            team: "T024BE7LD".into(),
            user: "U0G9QF9C6".into(),
        };
        let contact = Contact {
            email: Some("bob@example.com".into()),
            slack: Some(slack.clone()),
        };
        contacts.set("bob", &contact).await.unwrap();
        assert_eq!(contacts.get("bob").await.unwrap().unwrap().contact, contact);
        let who = contacts.by_slack(&slack).await.unwrap().unwrap();
        assert_eq!((who.name.as_str(), who.role), ("bob", Role::Approver));
        // The same Slack user for another: refused, naming whose it is.
        let err = contacts
            .set(
                "carol",
                &Contact {
                    email: None,
                    slack: Some(slack.clone()),
                },
            )
            .await
            .err()
            .unwrap();
        assert!(
            matches!(&err, AccountError::Exists(what) if what.contains("bob")),
            "{err}"
        );
        // A bad address, a bad id, a user who does not exist.
        let bad = contacts
            .set(
                "carol",
                &Contact {
                    email: Some("carol at example".into()),
                    slack: None,
                },
            )
            .await
            .err()
            .unwrap();
        assert!(
            matches!(bad, AccountError::Invalid { field: "email", .. }),
            "{bad}"
        );
        let bad_id = Contact {
            email: None,
            slack: Some(SlackId {
                team: "t1".into(),
                user: "U1".into(),
            }),
        };
        assert!(matches!(
            contacts.set("carol", &bad_id).await.unwrap_err(),
            AccountError::Invalid {
                field: "slack_team_id",
                ..
            }
        ));
        assert!(matches!(
            contacts
                .set("nobody", &Contact::default())
                .await
                .unwrap_err(),
            AccountError::NoUser(_)
        ));
        // Locked out: a press of theirs is nobody's.
        accounts
            .update_user("bob", Role::Approver, true, None)
            .await
            .unwrap();
        assert_eq!(
            contacts.by_slack(&slack).await.unwrap(),
            None,
            "{}",
            db.name
        );
        // Cleared: the Slack user is free for another.
        contacts.set("bob", &Contact::default()).await.unwrap();
        contacts
            .set(
                "carol",
                &Contact {
                    email: None,
                    slack: Some(slack.clone()),
                },
            )
            .await
            .unwrap();
        assert_eq!(contacts.all().await.unwrap().len(), 2);
    }
}
