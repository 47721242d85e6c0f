#!/usr/bin/env bash
# `make bench-peers`: our approve cycle (the hitl bench, one client) against LangGraph's
# (langgraph.sh), on this machine, in one run, at synchronous=FULL and NORMAL; prints each and
# the ratios. RUNS sets the cycles of each (default 300; the peer runs a third as many, it is
# slower). ROUNDS (default 3) repeats the comparison.
#
# The machine's speed drifts over seconds (a VM with neighbours), and the peer's run lasts about
# ten times ours. So each round measures ours just before and just after the peer and compares
# their mean with the peer (drift that is steady over the round cancels); the ratio reported is
# the median of the rounds'.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${RUNS:-300}
rounds=${ROUNDS:-3}
case "$runs$rounds" in
  *[!0-9]*) echo "bench-peers: RUNS and ROUNDS take whole numbers" >&2; exit 2 ;;
esac
[ "$rounds" -ge 1 ] || { echo "bench-peers: ROUNDS must be at least 1" >&2; exit 2; }
peer_runs=$(( runs / 3 > 20 ? runs / 3 : 20 ))
cargo bench -p nrllm-store --bench hitl --no-run --quiet
rate() { sed -n 's/.*cycles_per_s=\([0-9.]*\).*/\1/p' | head -1; }
ours() {
  local out
  out=$(cargo bench -p nrllm-store --bench hitl --quiet -- --runs "$runs" --synchronous "$1")
  echo "ours:  $(echo "$out" | head -2 | tr '\n' ' ')" >&2
  echo "$out" | rate
}
declare -A ratios
for round in $(seq 1 "$rounds"); do
  for sync in full normal; do
    before=$(ours "$sync")
    out=$(bench/peers/langgraph.sh --runs "$peer_runs" --synchronous "$sync")
    echo "peer:  $out"
    peer=$(echo "$out" | rate)
    after=$(ours "$sync")
    ratio=$(awk -v a="$before" -v b="$after" -v p="$peer" 'BEGIN { printf "%.1f", (a + b) / 2 / p }')
    awk -v r="$round" -v s="$sync" -v a="$before" -v b="$after" -v p="$peer" -v x="$ratio" \
      'BEGIN { printf "round %d, synchronous=%s: ours %.1f and %.1f cycles/s, langgraph %.1f cycles/s: %sx\n", r, s, a, b, p, x }'
    ratios[$sync]="${ratios[$sync]:-} $ratio"
  done
done
for sync in full normal; do
  median=$(echo "${ratios[$sync]}" | tr ' ' '\n' | sed '/^$/d' | sort -n |
    awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }')
  echo "synchronous=$sync: ours / langgraph, median of $rounds rounds: ${median}x (rounds:${ratios[$sync]})"
done
