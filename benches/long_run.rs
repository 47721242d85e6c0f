//! A long run stays light: for runs of 6 (about 20 steps), 10, 100 and 200 rounds (a scripted
//! model, about 1 KB per message: 1 KB of text in each turn, the prompt and the answer), prints
//! the bytes stored for the run's events, the bytes of its page (`GET /runs/<id>`: HTML with the
//! island props in it), and the median time to render that page on the server, over 20 renders.
//! Exits 1 if a page is above the budget of 100 KB (issue #19).
//!
//! `cargo bench -p nrllm-playground --features ssr --bench long_run`

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use http::Request;
use leptos::prelude::LeptosOptions;
use nrllm_core::provider::ChatResponse;
use nrllm_core::run_service::{RunService, SingleLoop};
use nrllm_core::run_store::RunConfiguration;
use nrllm_core::testing::{usage, ScriptedProvider};
use nrllm_core::transcript::ToolCall;
use nrllm_core::{RunSettings, ToolLoop};
use nrllm_playground::server::{routes, AppState};
use nrllm_playground::settings::Settings;
use nrllm_store::db::Database;
use serde_json::json;
use tower::ServiceExt;

const KB: usize = 1024;
/// The most a run page's HTML may weigh, however many steps the run has.
const PAGE_BUDGET_BYTES: usize = 100_000;

fn kilobyte_of(label: &str, round: usize) -> String {
    let head = format!("{label} {round}: ");
    format!("{head}{}", "x".repeat(KB - head.len()))
}

fn script(rounds: usize) -> Vec<ChatResponse> {
    let mut turns: Vec<ChatResponse> = (0..rounds)
        .map(|round| {
            let mut turn = ChatResponse::calls(
                vec![ToolCall::new(
                    format!("call_{round}"),
                    "search_pages",
                    &json!({"query": "pricing"}),
                )],
                usage(100, 20),
            );
            turn.content = Some(kilobyte_of("thinking", round));
            turn
        })
        .collect();
    turns.push(ChatResponse::text(
        kilobyte_of("answer", rounds),
        usage(100, 20),
    ));
    turns
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let url = format!("sqlite:{}/long.db", dir.path().display());
    let db = Database::connect(&url).await.expect("the database");
    let settings = Settings {
        database_url: url,
        ..Settings::default()
    };
    let options = LeptosOptions::builder()
        .output_name("nrllm-playground")
        .site_root("target/site")
        .site_pkg_dir("pkg")
        .build();
    let state = AppState::open(options, db.clone(), &settings)
        .await
        .expect("the app state");
    let router = routes::router(state.clone(), &settings);
    // Pages answer a signed-in reader under the server's own host name.
    let token = nrllm_store::accounts::AccountStore::new(db.clone())
        .create_program_token(
            "bench",
            nrllm_types::Role::Viewer,
            "long-run-bench",
            nrllm_core::clock::now_ms(),
        )
        .await
        .expect("a token");
    println!(
        "{:>6} {:>8} {:>14} {:>14} {:>12}",
        "rounds", "events", "stored bytes", "page bytes", "SSR median"
    );
    let mut over_budget = Vec::new();
    for rounds in [6usize, 10, 100, 200] {
        let run = long_run(&state, rounds).await;
        let (events, stored): (i64, i64) = sqlx::query_as(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM agent_run_event WHERE run_id = $1",
        )
        .bind(run.id.to_string())
        .fetch_one(db.pool())
        .await
        .expect("the stored size");
        let (page_bytes, median) = render_page(&router, run.id, &token).await;
        println!("{rounds:>6} {events:>8} {stored:>14} {page_bytes:>14} {median:>12.2?}");
        if page_bytes > PAGE_BUDGET_BYTES {
            over_budget.push(format!("{events} steps: {page_bytes} bytes"));
        }
    }
    if !over_budget.is_empty() {
        eprintln!(
            "long_run: run pages above {PAGE_BUDGET_BYTES} bytes: {}",
            over_budget.join(", ")
        );
        std::process::exit(1);
    }
}

/// A run of `rounds` rounds driven to its end by a scripted model, through the app's tools.
async fn long_run(state: &AppState, rounds: usize) -> nrllm_core::run_store::RunRecord {
    let provider = ScriptedProvider::new(script(rounds));
    let tool_loop = ToolLoop::new(Arc::new(provider), Arc::clone(&state.registry));
    let service = RunService::new(
        Arc::clone(&state.store),
        Arc::new(SingleLoop(Arc::new(tool_loop))),
    );
    let configuration = RunConfiguration {
        continues: None,
        approval_timeout_ms: None,
        provider: "demo".into(),
        model: "demo-1".into(),
        prompt: kilobyte_of("prompt", rounds),
        system_prompt: Some("Be brief.".into()),
        skills: Vec::new(),
        settings: RunSettings {
            max_rounds: rounds as u32 + 1,
            ..RunSettings::default()
        },
    };
    let run = service
        .start(configuration, "bench")
        .await
        .expect("the run");
    assert_eq!(run.counters.iterations as usize, rounds + 1);
    run
}

/// The run page's size and its median server-side render time over 20 requests (a first,
/// warming one aside).
async fn render_page(router: &axum::Router, run: uuid::Uuid, token: &str) -> (usize, Duration) {
    let mut page_bytes = 0;
    let mut samples: Vec<Duration> = Vec::new();
    for _ in 0..21 {
        let request = Request::get(format!("/runs/{run}"))
            .header("host", "127.0.0.1:3000")
            .header("authorization", format!("Bearer {token}"))
            .body(Body::empty())
            .expect("a request");
        let started = Instant::now();
        let response = router.clone().oneshot(request).await.expect("a response");
        assert_eq!(response.status(), 200);
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("the page");
        samples.push(started.elapsed());
        page_bytes = body.len();
    }
    samples.remove(0);
    samples.sort();
    (page_bytes, samples[samples.len() / 2])
}
