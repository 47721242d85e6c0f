# The two commands of the README: `make run` and `make test`. Both install what is missing first.
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)

# Postgres for the store tests (the local server this machine runs); override to point elsewhere.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test
export TEST_DATABASE_URL

# Leptos reads the wasm's name when it is compiled (`option_env!`), as cargo-leptos sets it. Every
# build here sets it the same way: the server the Rust tests build is the one Playwright drives
# (`e2e`), and its pages must ask for the wasm by the name cargo-leptos writes.
export LEPTOS_OUTPUT_NAME := nrllm-playground

# Playwright's server gets a database of its own, new for every run.
E2E_DB_DIR := target/e2e

.PHONY: run test setup setup-test lint structure unit e2e size abuse bench-long-run crash-test bench-hitl bench-peers bench-fill bench-deltas bench-http bench-restart bench-mix bench-smoke

setup:
	scripts/setup.sh

setup-test:
	scripts/setup.sh --test

## Build and serve the playground at http://127.0.0.1:3000 (SQLite file under data/, demo model).
run: setup
	cargo leptos serve

## Every test: lints, Rust tests of the whole workspace, then the Playwright suite.
test: setup-test lint unit bench-smoke e2e

lint: structure
	cargo fmt --all -- --check
	scripts/check-core-deps.sh
	cargo clippy --workspace --all-targets --features nrllm-playground/ssr -- -D warnings
	cargo clippy -p nrllm-playground --lib --features hydrate --target wasm32-unknown-unknown -- -D warnings

## The structure rules (crates/nrllm-lint): files of at most 600 lines and functions of at most 80
## outside tests, no import circle inside a crate, no app module importing a page or component.
structure:
	cargo run -q -p nrllm-lint --bin structure-lint

## Every `cargo test` here resolves the workspace's features as one: the whole workspace, with the
## server's `ssr`. A `-p` of one crate would resolve them differently (another crate's dev-dependencies
## left out) and rebuild most of the dependency graph again.
TEST := cargo test --workspace --features nrllm-playground/ssr

## Tests that need Postgres are #[ignore = "needs Postgres …"] (a plain `cargo test` lists them as
## ignored); this runs them too, on TEST_DATABASE_URL.
unit:
	$(TEST) -- --include-ignored

## Playwright drives the server binary the Rust tests built and killed (target/debug/nrllm-playground,
## made by `cargo test … --no-run`, nothing to do after `unit`); cargo-leptos builds only the browser's
## wasm and the CSS. Its own server build would build the graph again: a `cargo build` leaves the
## dev-dependencies' features out.
e2e:
	$(TEST) --no-run
	rm -rf $(E2E_DB_DIR) && mkdir -p $(E2E_DB_DIR)
	NRLLM_CONFIG=end2end/nrllm-e2e.toml NRLLM_DATABASE_URL=sqlite:$(E2E_DB_DIR)/e2e.db NRLLM_DEMO_THINK_MS=700 NRLLM_ADMIN_PASSWORD=e2e-admin-password-1 cargo leptos end-to-end --frontend-only

## What the browser downloads for a page (release build), against the 250 KB gzip budget.
size: setup
	cargo leptos build --release
	scripts/wasm-size.sh

## Server memory under abuse (release build): streams for unknown ids, 1,100 streams on one run,
## streams that connect and drop, a 50 MB body. Fails if a case ends 20 MB above where it began.
abuse:
	cargo build --release --features ssr --bin nrllm-playground
	cargo bench -p nrllm-playground --features ssr --bench abuse -- target/release/nrllm-playground

## Stored bytes, page bytes and server-side render time of 10-, 100- and 200-round runs.
bench-long-run:
	cargo bench -p nrllm-playground --features ssr --bench long_run

## The kill -9 harness as a soak: N kills of the server binary, spread over every failpoint
## (`make test` runs 8 at each point). Prints kills per point and restart times.
N ?= 140
crash-test:
	NRLLM_CRASH_KILLS=$(N) $(TEST) --test crash every_failpoint -- --nocapture

## The approve cycle, one client and many: cycles/s and p50/p99 at N = 1, 8 and 64 clients on
## SQLite (synchronous FULL, then NORMAL) and Postgres (a scratch database on TEST_DATABASE_URL's
## server). RUNS cycles per case.
RUNS ?= 2000
bench-hitl:
	cargo bench -p nrllm-store --bench hitl --no-run
	for n in 1 8 64; do \
	  cargo bench -p nrllm-store --bench hitl --quiet -- --runs $(RUNS) --concurrency $$n --synchronous full && \
	  cargo bench -p nrllm-store --bench hitl --quiet -- --runs $(RUNS) --concurrency $$n --synchronous normal && \
	  cargo bench -p nrllm-store --bench hitl --quiet -- --runs $(RUNS) --concurrency $$n --db $(TEST_DATABASE_URL) || exit 1; \
	done

## Ours against LangGraph's approve cycle (bench/peers/, its own virtualenv), FULL and NORMAL, as ratios;
## at FULL also the share of the disk's fsync limit each round reached.
bench-peers:
	bench/peers/compare.sh

## 100, 10,000 and 100,000 waiting runs: server RSS, /approvals, nrllm_runs_list and one approval at
## each (release build); fails if any is more than 3x its value at 100. Prints the query plans.
bench-fill:
	cargo bench -p nrllm-playground --features ssr --bench fill -- --check

## A streamed response's pieces from the provider's write to a live-stream client: p50/p99 delay
## and the server's CPU a piece (release build; a local fake provider).
bench-deltas:
	cargo bench -p nrllm-playground --features ssr --bench deltas

## The approve cycle through the whole server (release build): HTTP_RUNS runs waiting for approval,
## approved over HTTP by one client deciding every 10 ms (latency), then by 1 and 32 clients as fast
## as answered (capacity), with tokens and digests while browsers follow live streams, on SQLite
## NORMAL and FULL and Postgres (and there with the browsers on a second instance, also with 32
## clients each deciding every 100 ms: a load it sustains); decisions/s, HTTP p50/p99/p99.9,
## approve -> effect, approve -> completed and step commit -> browser. The store's own cycle
## (hitl) at 32 clients runs in the same sitting, for the ratio BENCHMARKS.md reports.
HTTP_RUNS ?= 300
bench-http:
	cargo bench -p nrllm-playground --features ssr --bench http --no-run
	cargo bench -p nrllm-store --bench hitl --no-run
	for db in normal full postgres; do \
	  cargo bench -p nrllm-playground --features ssr --bench http --quiet -- --runs $(HTTP_RUNS) --clients 1 --every-ms 10 --db $$db || exit 1; \
	  for c in 1 32; do \
	    cargo bench -p nrllm-playground --features ssr --bench http --quiet -- --runs $(HTTP_RUNS) --clients $$c --db $$db || exit 1; \
	  done; \
	done
	cargo bench -p nrllm-playground --features ssr --bench http --quiet -- --runs $(HTTP_RUNS) --clients 1 --every-ms 10 --db postgres --follow-on-other
	cargo bench -p nrllm-playground --features ssr --bench http --quiet -- --runs $(HTTP_RUNS) --clients 32 --db postgres --follow-on-other
	cargo bench -p nrllm-playground --features ssr --bench http --quiet -- --runs 1000 --follow 300 --clients 32 --every-ms 100 --db postgres --follow-on-other
	cargo bench -p nrllm-store --bench hitl --quiet -- --runs 5000 --concurrency 32 --synchronous normal
	cargo bench -p nrllm-store --bench hitl --quiet -- --runs 2000 --concurrency 32 --synchronous full
	cargo bench -p nrllm-store --bench hitl --quiet -- --runs 5000 --concurrency 32 --db $(TEST_DATABASE_URL)

## Restart and handoff against the release server (benches/restart.rs): SIGKILL with runs running,
## as many queued and 1,000 waiting, then a start at once (SQLite, 16 and 64 running); on Postgres,
## an instance killed and the other taking its runs over, at the default lease and at 5 s.
bench-restart:
	cargo bench -p nrllm-playground --features ssr --bench restart --no-run
	for n in 16 64; do \
	  cargo bench -p nrllm-playground --features ssr --bench restart --quiet -- --db sqlite --running $$n --waiting 1000 || exit 1; \
	done
	cargo bench -p nrllm-playground --features ssr --bench restart --quiet -- --db postgres --running 16 --waiting 1000
	cargo bench -p nrllm-playground --features ssr --bench restart --quiet -- --db postgres --running 16 --waiting 1000 --lease-secs 5

## The mix against the release server (benches/mix.rs): clients start runs, follow them live,
## approve them with their digests, for SECS seconds (an hour by default), on SQLite NORMAL; the
## server's RSS where it settled after the first minute against the end.
SECS ?= 3600
bench-mix:
	cargo bench -p nrllm-playground --features ssr --bench mix --no-run
	cargo bench -p nrllm-playground --features ssr --bench mix --quiet -- --secs $(SECS) --clients 8 --db normal

## Short runs of the long benchmarks (debug build, figures not checked): they must run through. They
## reuse the build of `unit` (the same $(TEST)).
bench-smoke:
	$(TEST) --bench hitl -- --runs 64 --concurrency 8 --synchronous normal
	$(TEST) --bench hitl -- --runs 32 --concurrency 8 --db $(TEST_DATABASE_URL)
	$(TEST) --bench hitl -- --runs 32 --concurrency 4 --synchronous normal --otlp
	$(TEST) --bench hitl -- --runs 32 --synchronous normal --floor
	$(TEST) --bench fill -- --sizes 20,200
	$(TEST) --bench long_run
	$(TEST) --bench deltas -- --runs 2 --chunks 20
	$(TEST) --bench http -- --runs 24 --clients 4 --db normal
	$(TEST) --bench restart -- --db sqlite --running 4 --waiting 20
	$(TEST) --bench mix -- --secs 8 --clients 4 --db normal
	$(TEST) --bench http -- --runs 16 --clients 4 --db postgres --follow-on-other
	$(TEST) --bench restart -- --db postgres --running 4 --waiting 10 --lease-secs 2
