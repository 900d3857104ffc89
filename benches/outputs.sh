#!/usr/bin/env bash
# What recording and webhooks cost the server: the same load (`tutti load`,
# CLIENTS participants in ROOMS rooms) against a fresh server three ways,
# alternated ROUNDS times in one session (the order rotates each round):
#   plain     no recording, no webhooks
#   record    every room recorded from its first join (`tutti load --record`)
#   hooks     recorded, and webhooks on: the server posts every event to the
#             load tester's own receiver (`tutti load --webhook-listen`)
#   speakers  recorded with a file per speaker beside the mix
#             (`tutti load --record-per-speaker`)
# MODES (default "plain record hooks") picks and orders them, e.g.
#   MODES="plain record speakers" benches/outputs.sh 500 1 2 --talkers 0.1
# Each prints the load tester's final summary (server CPU per participant
# per tick from /proc/PID, quality, validity) and, for `hooks`, the events
# the receiver counted.
#
#   cargo build --release --bin tutti
#   benches/outputs.sh CLIENTS ROOMS ROUNDS [load args…]
#   e.g. benches/outputs.sh 1000 20 2 --life 40 --no-ws
#
# Loopback only; every loop is bounded; recordings go to a temporary
# directory removed after each run.
set -euo pipefail
cd "$(dirname "$0")/.."
clients=$1 rooms=$2 rounds=$3
shift 3
load_args=("$@")
bin=target/release/tutti
# shellcheck source=benches/lib.sh
. benches/lib.sh
bench_ports
hooks=127.0.0.1:${TUTTI_BENCH_HOOK_PORT:-28090}
log=${TMPDIR:-/tmp}/tutti-outputs
secret=bench-secret-bench-secret-bench-secret-0123

one_run() { # NAME
    local name=$1 dir
    dir=$(mktemp -d "${TMPDIR:-/tmp}/tutti-outputs-rec.XXXXXX")
    local serve=(--set "recording.dir=$dir") load=()
    case $name in
        record) load=(--record) ;;
        speakers) load=(--record-per-speaker) ;;
        hooks)
            load=(--record --webhook-listen "$hooks")
            serve+=(--set "auth.secret=$secret" --set "webhooks.urls=http://$hooks/")
            ;;
    esac
    start_server "$log-server-$name.log" "$bin" "${serve[@]}"
    "$bin" load --url "http://$http" -n "$clients" --rooms "$rooms" --cint 10 --server-pid "$server_pid" --details 0 \
        --room-details 0 "${load[@]}" "${load_args[@]}" >"$log-load-$name.log" 2>&1 || true
    stop_server
    local bytes files
    bytes=$(du -sb "$dir" | cut -f1)
    files=$(find "$dir" -type f | wc -l)
    echo "== $name ($bytes bytes recorded in $files files)"
    rm -rf "$dir"
    # The final summary: the last block the load tester printed before the rooms table.
    sed -n '/== final summary ==/,/== clients ==/p' "$log-load-$name.log" |
        grep -E 'MOS|loss %|server CPU|INVALID|warning' | sed 's/^/   /' || true
    sed -n '/== webhooks received ==/,/== clients ==/p' "$log-load-$name.log" | grep -v -e '== clients' -e '^$' |
        sed 's/^/   /' || true
}

read -r -a names <<<"${MODES:-plain record hooks}"
n=${#names[@]}
echo "$clients clients in $rooms rooms; $rounds rounds of ${names[*]}"
for r in $(seq "$rounds"); do
    for i in $(seq 0 $((n - 1))); do
        one_run "${names[$(((i + r - 1 + ${TUTTI_BENCH_ROTATE:-0}) % n))]}"
    done
done
