#!/usr/bin/env bash
# Installs what building and testing the playground needs, skipping whatever is already there.
# Usage: scripts/setup.sh          (build tools: wasm32 target, cargo-leptos, wasm-bindgen, npm packages)
#        scripts/setup.sh --test   (also Playwright's npm packages and Debian's Chromium)
# Nothing here downloads from GitHub: cargo-leptos finds tailwindcss, wasm-opt and wasm-bindgen on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_LEPTOS_VERSION=0.3.10
want_test=false
[ "${1:-}" = "--test" ] && want_test=true

say() { printf 'setup: %s\n' "$*"; }
export PATH="$HOME/.cargo/bin:$PATH"

# Run apt-get as root, or through sudo when we are not root.
apt_install() {
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  if [ ! -f /tmp/.nrllm-apt-updated ]; then
    $sudo apt-get update -qq && touch /tmp/.nrllm-apt-updated
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

command -v cargo >/dev/null || { echo "setup: cargo is missing; install Rust with rustup first (README, Prerequisites)" >&2; exit 1; }

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
  say "adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown
fi

if [ "$(cargo leptos --version 2>/dev/null | awk '{print $2}')" != "$CARGO_LEPTOS_VERSION" ]; then
  say "installing cargo-leptos $CARGO_LEPTOS_VERSION (takes ~20 minutes on 2 cores, once)"
  cargo install cargo-leptos --locked --version "$CARGO_LEPTOS_VERSION"
fi

# The wasm-bindgen CLI must match the wasm-bindgen crate in Cargo.lock exactly.
bindgen_version=$(awk '/^name = "wasm-bindgen"$/ {getline; gsub(/version = |"/, ""); print; exit}' Cargo.lock)
if [ -z "$bindgen_version" ]; then
  echo "setup: cannot find wasm-bindgen in Cargo.lock" >&2; exit 1
fi
if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$bindgen_version" ]; then
  say "installing wasm-bindgen-cli $bindgen_version"
  # Not --locked: the CLI's own lock file pins a crate release the registry no longer serves.
  cargo install wasm-bindgen-cli --version "$bindgen_version"
fi

if ! command -v npm >/dev/null; then
  say "installing Node.js and npm from Debian"
  apt_install nodejs npm
fi

# npm ci only when node_modules is missing or older than the lock file.
npm_ci() {
  local dir=$1
  if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    say "installing npm packages in $dir"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}
npm_ci .

if $want_test; then
  npm_ci end2end
  if ! command -v psql >/dev/null; then
    say "installing the Postgres client from Debian (the two-instance tests make a scratch database)"
    apt_install postgresql-client
  fi
  if [ ! -x /usr/bin/chromium ]; then
    say "installing Chromium from Debian (for the Playwright tests)"
    apt_install chromium
  fi
fi
say "ready"
