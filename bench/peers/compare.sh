#!/usr/bin/env bash
# `make bench-peers`: our approve cycle (the hitl bench, one client) against LangGraph's
# (langgraph.sh), on this machine, in one run, at synchronous=FULL and NORMAL; prints each and
# the ratios. RUNS sets the cycles of each (default 300; the peer runs a third as many, it is slower).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${RUNS:-300}
peer_runs=$(( runs / 3 > 20 ? runs / 3 : 20 ))
cargo bench -p nrllm-store --bench hitl --no-run --quiet
rate() { sed -n 's/.*cycles_per_s=\([0-9.]*\).*/\1/p' | head -1; }
declare -A ours peer
for sync in full normal; do
  out=$(cargo bench -p nrllm-store --bench hitl --quiet -- --runs "$runs" --synchronous "$sync")
  echo "ours:  $(echo "$out" | head -2 | tr '\n' ' ')"
  ours[$sync]=$(echo "$out" | rate)
  out=$(bench/peers/langgraph.sh --runs "$peer_runs" --synchronous "$sync")
  echo "peer:  $out"
  peer[$sync]=$(echo "$out" | rate)
done
for sync in full normal; do
  awk -v s="$sync" -v a="${ours[$sync]}" -v b="${peer[$sync]}" \
    'BEGIN { printf "synchronous=%s: ours %.1f cycles/s, langgraph %.1f cycles/s: %.1fx\n", s, a, b, a / b }'
done
