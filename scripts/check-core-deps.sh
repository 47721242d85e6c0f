#!/usr/bin/env bash
# The core does no I/O, and the compiler keeps it so only if no I/O library is among its
# dependencies: fail if nrllm-core (or nrllm-types, which the browser's bundle uses) depends on a
# database, HTTP or socket library, however indirectly.
set -euo pipefail
cd "$(dirname "$0")/.."
forbidden='^(sqlx|sqlx-core|reqwest|hyper|hyper-util|h2|mio|axum|tower|rustls|libsqlite3-sys|tokio-postgres)$'
status=0
for crate in nrllm-core nrllm-types; do
  found=$(cargo tree -p "$crate" -e normal --prefix none --format '{p}' | awk '{print $1}' | sort -u | grep -E "$forbidden" || true)
  if [ -n "$found" ]; then
    echo "check-core-deps: $crate depends on I/O libraries: $(echo $found | tr '\n' ' ')" >&2
    status=1
  fi
done
[ $status -eq 0 ] && echo "check-core-deps: nrllm-core and nrllm-types depend on no database, HTTP or socket library"
exit $status
