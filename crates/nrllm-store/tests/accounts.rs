//! Users, sessions, API tokens and one-time login links on both backends.

use nrllm_store::accounts::{AccountError, AccountStore};
use nrllm_store::testing::backends;
use nrllm_types::Role;

#[tokio::test]
async fn passwords_sessions_tokens_and_links_hold_on_both_backends() {
    for db in backends().await {
        let accounts = AccountStore::new(db.db.clone());
        let now = 1_000_000;
        accounts
            .create_user("ann", Some("correct horse 1"), Role::Approver, now)
            .await
            .unwrap();
        assert!(matches!(
            accounts
                .create_user("ann", Some("another pass 1"), Role::Viewer, now)
                .await,
            Err(AccountError::Exists(_))
        ));
        assert!(matches!(
            accounts
                .create_user("bob", Some("short"), Role::Viewer, now)
                .await,
            Err(AccountError::Invalid {
                field: "password",
                ..
            })
        ));
        assert!(matches!(
            accounts
                .create_user("b<o>b", Some("long enough 1"), Role::Viewer, now)
                .await,
            Err(AccountError::Invalid { field: "name", .. })
        ));

        // Passwords: only the right one, only for an enabled user; stored hashed.
        let ann = accounts
            .check_password("ann", "correct horse 1")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ann.role, Role::Approver);
        assert!(accounts
            .check_password("ann", "wrong")
            .await
            .unwrap()
            .is_none());
        assert!(accounts
            .check_password("nobody", "correct horse 1")
            .await
            .unwrap()
            .is_none());
        let stored: String =
            sqlx::query_scalar("SELECT password_hash FROM app_user WHERE name = 'ann'")
                .fetch_one(db.db.pool())
                .await
                .unwrap();
        assert!(stored.starts_with("$argon2id$") && !stored.contains("correct horse"));

        // Sessions: valid until they expire; ended by logout, by disabling, by a new role.
        let secret = accounts.create_session("ann", now, 1000).await.unwrap();
        let who = accounts.session(&secret, now + 10).await.unwrap().unwrap();
        assert_eq!((who.name.as_str(), who.role), ("ann", Role::Approver));
        assert!(
            accounts
                .session(&secret, now + 1000)
                .await
                .unwrap()
                .is_none(),
            "expired"
        );
        assert!(accounts
            .session("not-a-session", now)
            .await
            .unwrap()
            .is_none());
        accounts.end_session(&secret).await.unwrap();
        assert!(
            accounts.session(&secret, now + 10).await.unwrap().is_none(),
            "logged out"
        );
        let secret = accounts.create_session("ann", now, 1000).await.unwrap();
        accounts
            .update_user("ann", Role::Approver, true, None)
            .await
            .unwrap();
        assert!(
            accounts.session(&secret, now + 10).await.unwrap().is_none(),
            "disabled"
        );
        assert!(accounts
            .check_password("ann", "correct horse 1")
            .await
            .unwrap()
            .is_none());
        accounts
            .update_user("ann", Role::Viewer, false, Some("new password 22"))
            .await
            .unwrap();
        assert!(accounts
            .check_password("ann", "correct horse 1")
            .await
            .unwrap()
            .is_none());
        let ann = accounts
            .check_password("ann", "new password 22")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ann.role, Role::Viewer);
        assert!(matches!(
            accounts.update_user("zed", Role::Viewer, false, None).await,
            Err(AccountError::NoUser(_))
        ));

        // Tokens belong to a user: they act as that user, with the lower of the two roles (Ann
        // is a viewer now); revoked, they are gone.
        let token = accounts
            .create_token("ci", Role::Operator, "ann", "admin", now)
            .await
            .unwrap();
        let who = accounts.token(&token, now).await.unwrap().unwrap();
        assert_eq!(
            (who.name.as_str(), who.role, who.token.as_deref()),
            ("ann", Role::Viewer, Some("ci"))
        );
        let listed = accounts.tokens(Some("ann")).await.unwrap();
        assert_eq!(listed[0].last_used_at_ms, Some(now));
        assert_eq!(listed[0].user.as_deref(), Some("ann"));
        assert!(accounts.tokens(Some("zed")).await.unwrap().is_empty());
        assert!(matches!(
            accounts
                .create_token("nobody", Role::Viewer, "zed", "admin", now)
                .await,
            Err(AccountError::NoUser(_))
        ));
        assert!(accounts.token("nrllm_guess", now).await.unwrap().is_none());
        // A user revokes only their own tokens.
        assert!(!accounts.revoke_token("ci", Some("zed")).await.unwrap());
        // Disabled, its user's tokens stop working; enabled again, they work.
        accounts
            .update_user("ann", Role::Viewer, true, None)
            .await
            .unwrap();
        assert!(accounts.token(&token, now).await.unwrap().is_none());
        accounts
            .update_user("ann", Role::Viewer, false, None)
            .await
            .unwrap();
        assert!(accounts.token(&token, now).await.unwrap().is_some());
        assert!(accounts.revoke_token("ci", Some("ann")).await.unwrap());
        assert!(accounts.token(&token, now).await.unwrap().is_none());
        assert!(!accounts.revoke_token("ci", None).await.unwrap());

        // One-time links: once, and not after they expire.
        let link = accounts.create_login_link("ann", now, 1000).await.unwrap();
        assert_eq!(
            accounts
                .use_login_link(&link, now + 1)
                .await
                .unwrap()
                .as_deref(),
            Some("ann")
        );
        assert_eq!(accounts.use_login_link(&link, now + 2).await.unwrap(), None);
        let late = accounts.create_login_link("ann", now, 1000).await.unwrap();
        assert_eq!(
            accounts.use_login_link(&late, now + 5000).await.unwrap(),
            None
        );

        // A server secret is made once and then stays.
        let key = accounts.server_secret("k").await.unwrap();
        assert_eq!(accounts.server_secret("k").await.unwrap(), key);
        assert_eq!(accounts.user_count().await.unwrap(), 1);
        db.cleanup().await;
    }
}
