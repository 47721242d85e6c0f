use super::*;
use std::path::Path;

fn load(text: Option<&str>, env: &[(&str, &str)]) -> Result<Settings, SettingsError> {
    Settings::from_sources(Path::new("Leptos.toml"), text, |name| {
        env.iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.to_string())
    })
}

#[test]
fn no_file_and_no_environment_gives_the_defaults() {
    assert_eq!(load(None, &[]).unwrap(), Settings::default());
}

#[test]
fn the_file_sets_values_and_the_environment_overrides_them() {
    let text = "site_addr = \"0.0.0.0:8080\"\ndatabase_url = \"postgres://a@b/c\"\n";
    let settings = load(Some(text), &[("NRLLM_SITE_ADDR", "127.0.0.1:4000")]).unwrap();
    assert_eq!(settings.site_addr.port(), 4000);
    assert_eq!(settings.database_url, "postgres://a@b/c");
    assert_eq!(settings.log_level, "info");
}

#[test]
fn a_bad_value_names_the_setting_and_the_file() {
    let err = load(Some("site_addr = \"nowhere\""), &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`site_addr`") && err.contains("Leptos.toml"),
        "{err}"
    );
    let err = load(None, &[("NRLLM_DATABASE_URL", "mysql://x")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`database_url`") && err.contains("NRLLM_DATABASE_URL"),
        "{err}"
    );
    let err = load(Some("log_level = \"info,=[\""), &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("`log_level`"), "{err}");
}

#[test]
fn sqlite_syncing_is_full_unless_set_to_normal() {
    use nrllm_store::db::SqliteSync;
    let settings = load(Some("sqlite_synchronous = \"normal\""), &[]).unwrap();
    assert_eq!(settings.sqlite_synchronous, SqliteSync::Normal);
    let settings = load(
        Some("sqlite_synchronous = \"normal\""),
        &[("NRLLM_SQLITE_SYNCHRONOUS", "FULL")],
    )
    .unwrap();
    assert_eq!(settings.sqlite_synchronous, SqliteSync::Full);
    let err = load(None, &[("NRLLM_SQLITE_SYNCHRONOUS", "off")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`sqlite_synchronous`") && err.contains("`full` or `normal`"),
        "{err}"
    );
}

#[test]
fn retention_windows_are_whole_days() {
    let settings = load(
        Some("retention_terminal_days = 7\nretention_waiting_days = 14"),
        &[("NRLLM_RETENTION_WAITING_DAYS", "21")],
    )
    .unwrap();
    assert_eq!(
        (
            settings.retention_terminal_days,
            settings.retention_waiting_days
        ),
        (7, 21)
    );
    let err = load(Some("retention_terminal_days = 0"), &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`retention_terminal_days`") && err.contains("Leptos.toml"),
        "{err}"
    );
    let err = load(None, &[("NRLLM_RETENTION_WAITING_DAYS", "soon")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("NRLLM_RETENTION_WAITING_DAYS"), "{err}");
}

#[test]
fn resource_limits_are_whole_numbers_within_their_range() {
    let settings = load(
        Some("max_body_bytes = 65536\nstream_limit_per_run = 3"),
        &[("NRLLM_STREAM_LIMIT_TOTAL", "7")],
    )
    .unwrap();
    assert_eq!(
        (
            settings.max_body_bytes,
            settings.stream_limit_per_run,
            settings.stream_limit_total
        ),
        (65536, 3, 7)
    );
    let err = load(Some("stream_limit_per_run = 0"), &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`stream_limit_per_run`") && err.contains("from 1 to 10000"),
        "{err}"
    );
    let err = load(None, &[("NRLLM_MAX_BODY_BYTES", "1")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`max_body_bytes`") && err.contains("NRLLM_MAX_BODY_BYTES"),
        "{err}"
    );
}

#[test]
fn mcp_servers_are_read_and_checked_with_the_setting_named() {
    let text = r#"
        mcp_call_timeout_secs = 30
        [[mcp_servers]]
        name = "notes"
        command = "@self"
        args = ["mcp-demo"]
        [[mcp_servers]]
        name = "tickets"
        url = "https://mcp.example.com/mcp"
        header_env = { Authorization = "TICKETS_AUTH" }
        call_timeout_secs = 5
    "#;
    let settings = load(Some(text), &[("NRLLM_MCP_CALL_TIMEOUT_SECS", "45")]).unwrap();
    assert_eq!(settings.mcp_call_timeout_secs, 45);
    let [notes, tickets] = settings.mcp_servers.as_slice() else {
        panic!("two servers")
    };
    assert_eq!(notes.call_timeout, std::time::Duration::from_secs(45));
    assert_eq!(tickets.call_timeout, std::time::Duration::from_secs(5));
    assert_eq!(
        tickets.endpoint(),
        "Streamable HTTP: https://mcp.example.com/mcp"
    );
    let secret = "[[mcp_servers]]\nname = \"t\"\nurl = \"https://h\"\nheaders = { Authorization = \"Bearer s3cret\" }\n";
    let err = load(Some(secret), &[]).unwrap_err().to_string();
    assert!(
        err.contains("setting `mcp_servers`") && err.contains("header_env"),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "{err}");
    let unknown = "[[mcp_servers]]\nname = \"t\"\ncomand = \"x\"\n";
    let err = load(Some(unknown), &[]).unwrap_err().to_string();
    assert!(err.contains("comand"), "{err}");
    assert!(load(None, &[]).unwrap().mcp_servers.is_empty());
}

#[test]
fn model_configurations_are_read_and_checked() {
    let text = r#"
        [[configurations]]
        name = "openai"
        kind = "openai"
        model = "gpt-4o-mini"
        price_input_per_million = 0.15
        price_cached_input_per_million = 0.075
        price_reasoning_per_million = 2.5

        [[configurations]]
        name = "ollama"
        kind = "openai"
        model = "llama3.1"
        base_url = "http://127.0.0.1:11434/v1"
        api_key_env = ""
        stream = false
    "#;
    let settings = load(Some(text), &[("OPENAI_BASE_URL", "http://proxy.local/v1")]).unwrap();
    let [openai, ollama] = settings.configurations.as_slice() else {
        panic!("two configurations")
    };
    assert_eq!(openai.base_url.as_deref(), Some("http://proxy.local/v1"));
    assert_eq!(openai.key_env(), Some("OPENAI_API_KEY"));
    assert_eq!(
        ollama.base_url.as_deref(),
        Some("http://127.0.0.1:11434/v1")
    );
    assert_eq!(ollama.key_env(), None);
    assert_eq!((openai.stream, ollama.stream), (None, Some(false)));
    let prices = openai.prices();
    assert_eq!(
        (
            prices.input,
            prices.cached_input,
            prices.reasoning,
            prices.cache_write
        ),
        (Some(0.15), Some(0.075), Some(2.5), None)
    );
    // Every price is checked, the parts' too.
    let negative = "[[configurations]]\nname = \"a\"\nkind = \"openai\"\nmodel = \"m\"\nprice_cache_write_per_million = -1\n";
    let err = load(Some(negative), &[]).unwrap_err().to_string();
    assert!(err.contains("prices must be numbers of 0 or more"), "{err}");

    let twice = "[[configurations]]\nname = \"a\"\nkind = \"openai\"\nmodel = \"m\"\n[[configurations]]\nname = \"a\"\nkind = \"gemini\"\nmodel = \"m\"\n";
    let err = load(Some(twice), &[]).unwrap_err().to_string();
    assert!(
        err.contains("`configurations`") && err.contains("own name"),
        "{err}"
    );
    let bad_kind = "[[configurations]]\nname = \"a\"\nkind = \"cohere\"\nmodel = \"m\"\n";
    assert!(load(Some(bad_kind), &[])
        .unwrap_err()
        .to_string()
        .contains("Leptos.toml"));
    let bad_url = "[[configurations]]\nname = \"a\"\nkind = \"openai\"\nmodel = \"m\"\nbase_url = \"ftp://x\"\n";
    assert!(load(Some(bad_url), &[])
        .unwrap_err()
        .to_string()
        .contains("base_url"));
}

#[test]
fn approval_timeouts_are_durations_or_none() {
    assert_eq!(
        load(None, &[]).unwrap().approval_timeout_ms,
        Some(86_400_000)
    );
    let settings = load(
        Some("approval_timeout = \"90m\"\n[[configurations]]\nname = \"a\"\nkind = \"demo\"\nmodel = \"m\"\napproval_timeout = \"none\"\n"),
        &[],
    )
    .unwrap();
    assert_eq!(settings.approval_timeout_ms, Some(5_400_000));
    assert_eq!(
        settings.configurations[0].approval_timeout.as_deref(),
        Some("none")
    );
    assert_eq!(
        load(None, &[("NRLLM_APPROVAL_TIMEOUT", "none")])
            .unwrap()
            .approval_timeout_ms,
        None
    );
    assert_eq!(parse_timeout("2s"), Ok(Some(2000)));
    let err = load(None, &[("NRLLM_APPROVAL_TIMEOUT", "soon")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`approval_timeout`") && err.contains("24h"),
        "{err}"
    );
    assert!(parse_timeout("0s").is_err());
    let err = load(
        Some("[[configurations]]\nname = \"a\"\nkind = \"demo\"\nmodel = \"m\"\napproval_timeout = \"later\"\n"),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("configuration `a`"), "{err}");
}

#[test]
fn webhook_settings_are_checked() {
    let settings = load(
        Some("webhook_url = \"https://hooks.example/nrllm\"\nwebhook_max_attempts = 3"),
        &[("NRLLM_WEBHOOK_BACKOFF_MS", "50")],
    )
    .unwrap();
    assert_eq!(
        settings.webhook_url.as_deref(),
        Some("https://hooks.example/nrllm")
    );
    assert_eq!(
        (settings.webhook_max_attempts, settings.webhook_backoff_ms),
        (3, 50)
    );
    assert_eq!(settings.webhook_secret_env, "NRLLM_WEBHOOK_SECRET");
    let err = load(Some("webhook_url = \"hooks.example\""), &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`webhook_url`") && err.contains("http://"),
        "{err}"
    );
    let err = load(
        Some("[[configurations]]\nname = \"a\"\nkind = \"demo\"\nmodel = \"m\"\nwebhook_url = \"ftp://x\"\n"),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("configuration `a`"), "{err}");
    let err = load(None, &[("NRLLM_WEBHOOK_MAX_ATTEMPTS", "0")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("`webhook_max_attempts`"), "{err}");
}

#[test]
fn unknown_keys_and_broken_syntax_are_refused_with_the_file_name() {
    let err = load(Some("site_adr = \"x\""), &[]).unwrap_err().to_string();
    assert!(
        err.contains("Leptos.toml") && err.contains("site_adr"),
        "{err}"
    );
    let err = load(Some("site_addr = "), &[]).unwrap_err().to_string();
    assert!(err.contains("Leptos.toml"), "{err}");
}

#[test]
fn daily_spend_caps_are_read_in_dollars_and_a_configurations_own_wins() {
    let text = r#"
        [spend_caps]
        configuration_usd_per_day = 20
        user_usd_per_day = 2.5

        [[configurations]]
        name = "openai"
        kind = "openai"
        model = "gpt-4o-mini"
        spend_cap_usd_per_day = 0.75
    "#;
    let settings = load(Some(text), &[]).unwrap();
    let own = settings
        .spend_caps
        .for_configuration(settings.configurations[0].spend_cap_usd_per_day);
    assert_eq!(
        (own.per_configuration, own.per_user),
        (Some(750_000), Some(2_500_000))
    );
    let others = settings.spend_caps.for_configuration(None);
    assert_eq!(others.per_configuration, Some(20_000_000));
    assert!(Settings::default()
        .spend_caps
        .for_configuration(None)
        .is_empty());
    let err = load(Some("[spend_caps]\nuser_usd_per_day = -1\n"), &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("spend_caps") && err.contains("0 or more"),
        "{err}"
    );
    let err = load(Some("[spend_caps]\nteam_usd_per_day = 1\n"), &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("team_usd_per_day"), "{err}");
    let bad = "[[configurations]]\nname = \"a\"\nkind = \"openai\"\nmodel = \"m\"\nspend_cap_usd_per_day = -2\n";
    let err = load(Some(bad), &[]).unwrap_err().to_string();
    assert!(err.contains("spend_cap_usd_per_day"), "{err}");
}

#[test]
fn a_configuration_says_how_many_people_approve_its_turns_from_one_to_ten() {
    let text = r#"
        [[configurations]]
        name = "payments"
        kind = "demo"
        model = "demo-1"
        approvals_required = 2
        tool_approvals_required = { delete_page = 3, read_page = 1 }
    "#;
    let settings = load(Some(text), &[]).unwrap();
    let quorum = settings.configurations[0].quorum();
    assert_eq!(quorum.for_tool("create_page"), 2);
    assert_eq!(quorum.for_tool("delete_page"), 3);
    assert_eq!(quorum.for_tool("read_page"), 1);
    for bad in [
        "approvals_required = 0",
        "approvals_required = 11",
        "tool_approvals_required = { delete_page = 0 }",
    ] {
        let text = format!(
            "[[configurations]]\nname = \"a\"\nkind = \"demo\"\nmodel = \"demo-1\"\n{bad}\n"
        );
        let err = load(Some(&text), &[]).unwrap_err().to_string();
        assert!(
            err.contains("configuration `a`") && err.contains("must be from 1 to 10"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn span_export_settings_are_checked_and_named_when_wrong() {
    let settings = load(
        Some("otlp_endpoint = \"http://127.0.0.1:4318\"\ntrace_message_contents = true\n"),
        &[("NRLLM_OTLP_PROTOCOL", "grpc")],
    )
    .unwrap();
    assert_eq!(
        settings.otlp_endpoint.as_deref(),
        Some("http://127.0.0.1:4318")
    );
    assert_eq!(
        settings.otlp_protocol,
        Some(nrllm_telemetry::OtlpProtocol::Grpc)
    );
    assert!(settings.trace_message_contents);
    let defaults = load(None, &[]).unwrap();
    assert_eq!(
        (defaults.otlp_endpoint, defaults.otlp_protocol),
        (None, None)
    );
    assert!(!defaults.trace_message_contents);
    for (env, key) in [
        (("NRLLM_OTLP_ENDPOINT", "collector:4318"), "`otlp_endpoint`"),
        (("NRLLM_OTLP_PROTOCOL", "http/json"), "`otlp_protocol`"),
        (
            ("NRLLM_TRACE_MESSAGE_CONTENTS", "yes"),
            "`trace_message_contents`",
        ),
    ] {
        let err = load(None, &[env]).unwrap_err().to_string();
        assert!(err.contains(key) && err.contains(env.0), "{err}");
    }
}
