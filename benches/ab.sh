#!/usr/bin/env bash
# The same load (`tutti load`) against two servers, alternated ROUNDS times in
# one session, so that their figures can be compared on a noisy machine:
# two builds (before/after a change) or one build with two settings (e.g.
# `--set media.lean_send=false`). Each prints the load tester's final
# summary: server CPU per participant per tick (from /proc/PID), quality,
# and whether the generator kept up (INVALID otherwise).
#
#   cargo build --release --bin tutti
#   benches/ab.sh CLIENTS ROUNDS NAME_A 'SERVER_A [serve args…]' NAME_B 'SERVER_B [serve args…]' [load args…]
#   e.g. benches/ab.sh 1000 2 before '/tmp/tutti-before' after 'target/release/tutti' --life 40
#        benches/ab.sh 1000 2 lean 'target/release/tutti' old 'target/release/tutti --set lean_send=false'
#
# The load generator is always target/release/tutti. Loopback only; every
# loop is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
clients=$1 rounds=$2 name_a=$3 cmd_a=$4 name_b=$5 cmd_b=$6
shift 6
load_args=("$@")
load=target/release/tutti
# shellcheck source=benches/lib.sh
. benches/lib.sh
bench_ports
log=${TMPDIR:-/tmp}/tutti-ab

one_run() { # NAME 'CMD…'
    local name=$1 bin extra
    read -r bin extra <<<"$2"
    # shellcheck disable=SC2086
    start_server "$log-server-$name.log" "$bin" $extra
    "$load" load --url "http://$http" -n "$clients" --cint 10 --server-pid "$server_pid" --details 0 "${load_args[@]}" >"$log-load-$name.log" 2>&1 || true
    stop_server
    echo "== $name"
    # The final summary: the last block the load tester printed.
    awk '/^\[/{block=""} {block=block $0 "\n"} END {printf "%s", block}' "$log-load-$name.log" |
        grep -E '^ *\[|MOS|loss %|server CPU|INVALID|warning' | sed 's/^/   /' || true
}

echo "$clients clients; $rounds rounds of $name_a / $name_b"
for r in $(seq "$rounds"); do
    if [ $((r % 2)) = 1 ]; then one_run "$name_a" "$cmd_a"; one_run "$name_b" "$cmd_b"
    else one_run "$name_b" "$cmd_b"; one_run "$name_a" "$cmd_a"; fi
done
