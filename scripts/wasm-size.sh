#!/usr/bin/env bash
# What the browser downloads for any page of a release build: the wasm and JS under
# target/site/pkg, gzipped, against the budget of 250 KB (DESIGN.md). Every page loads the same
# bundle (islands), so one total is the number for every page.
# Usage: scripts/wasm-size.sh   (after `cargo leptos build --release`; `make size` does both)
set -euo pipefail
cd "$(dirname "$0")/.."

budget=250000
pkg=target/site/pkg
if ! compgen -G "$pkg/*.wasm" >/dev/null; then
  echo "size: no wasm under $pkg; build with 'cargo leptos build --release' first" >&2
  exit 1
fi

total=0
while IFS= read -r file; do
  raw=$(stat -c %s "$file")
  gz=$(gzip -9 -c "$file" | wc -c)
  printf '%-44s %9d bytes %9d gzip\n' "${file#"$pkg"/}" "$raw" "$gz"
  total=$((total + gz))
done < <(find "$pkg" -type f \( -name '*.wasm' -o -name '*.js' \) | sort)

printf '%-44s %9s       %9d gzip (budget %d)\n' "total" "" "$total" "$budget"
if [ "$total" -gt "$budget" ]; then
  echo "size: over the budget by $((total - budget)) bytes" >&2
  exit 1
fi
