#!/usr/bin/env bash
# A soak: a three-node cluster (a real redis-server, nodes on 127.0.0.2–4)
# under churn for DURATION seconds. LANES load generators each run
# `tutti load` again and again (PER_LANE participants in rooms of mixed
# sizes, every client holding its room WebSocket, each run living 2–5 min
# in fresh rooms), against the nodes in turn, so about LANES × PER_LANE
# people are in calls at any time and rooms are made and emptied all along.
# Halfway (RESTART_AT), node 3 is stopped with SIGTERM (it drains: its
# rooms move, the clients rejoin where the `moved` event sends them) and
# started again.
#
# Every SAMPLE seconds it writes each node's resident memory, open file
# descriptors, threads and participants, and Redis's key count, to
# $OUT/samples.csv; at the end it prints the first sample after WARMUP
# against the last (per node, the restarted node from its restart's
# warm-up on) and what the load runs did (calls, lost calls, moves).
#
#   cargo build --release --bin tutti
#   benches/soak.sh                    # 1 h, 5 × 100 participants
#   env: DURATION=3600 LANES=5 PER_LANE=100 RESTART_AT=DURATION/2 SAMPLE=30
#        WARMUP=300 SIZES=2:30,10:50,50:20 OUT=/tmp/tutti-soak
#        BIN=target/release/tutti
#
# Every generator joins its clients with one admin token (one identity)
# from one address, so the nodes' per-address and per-identity connection
# limits are raised (as the load-testing quick start does); a real crowd
# brings a token per person.
#
# Needs redis-server (Debian's redis-server). Loopback only; every loop is
# bounded by DURATION; every process it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BIN:-$PWD/target/release/tutti}
[ -x "$bin" ] || { echo "build it first: cargo build --release --bin tutti" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "needs redis-server (apt-get install redis-server)" >&2; exit 1; }
duration=${DURATION:-3600}
lanes=${LANES:-5}
per_lane=${PER_LANE:-100}
restart_at=${RESTART_AT:-$((duration / 2))}
sample=${SAMPLE:-30}
warmup=${WARMUP:-300}
sizes=${SIZES:-2:30,10:50,50:20}
out=${OUT:-${TMPDIR:-/tmp}/tutti-soak}
rm -rf "$out" && mkdir -p "$out/runs"
secret=soak-bench-secret-0123456789abcdef01234
http=28280 metrics=29290 media=24200 redis_port=26490
nodes=(127.0.0.2 127.0.0.3 127.0.0.4)
declare -A node_pid=()
pids=()
cleanup() {
    for p in "${pids[@]}" "${node_pid[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

metric() { # ADDR NAME: the sum of a metric's samples
    curl -sf --max-time 2 "http://$1/metrics" | awk -v m="$2" '$1 == m || index($1, m "{") == 1 { s += $NF } END { printf "%.0f", s }'
}

start_node() { # IP
    local ip=$1
    TUTTI_AUTH_SECRET=$secret \
    TUTTI_CLUSTER_SECRET=$secret-cluster \
    TUTTI_CLUSTER_REDIS_URL=redis://127.0.0.1:$redis_port/0 \
    TUTTI_CLUSTER_NODE_ID=node-${ip##*.} \
    TUTTI_CLUSTER_API_URL=http://$ip:$http \
    TUTTI_CLUSTER_MEDIA_ADDR=$ip:$media \
    TUTTI_LIMITS_JOIN_RATE_PER_SECOND=0 \
    TUTTI_LIMITS_MAX_CONNECTIONS_PER_ADDRESS=100000 TUTTI_LIMITS_MAX_CONNECTIONS_PER_IDENTITY=100000 \
    TUTTI_IO_THREADS=1 TUTTI_MIX_THREADS=1 \
        "$bin" serve --http "$ip:$http" --media "$ip:$media" --metrics "$ip:$metrics" \
        >>"$out/node-${ip##*.}.log" 2>&1 &
    node_pid[$ip]=$!
    for _ in $(seq 100); do curl -sf "http://$ip:$http/readyz" >/dev/null && return 0; sleep 0.1; done
    echo "node $ip did not get ready" >&2
    return 1
}

redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >"$out/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
for ip in "${nodes[@]}"; do start_node "$ip"; done
token=$(TUTTI_AUTH_SECRET=$secret "$bin" token --room '*' --identity soak --admin --ttl $((duration + 3600)))

t0=$(date +%s)
end=$((t0 + duration))

lane() { # L: load runs until the end, each in fresh rooms on the next node
    local l=$1 i=0 now life ip
    while :; do
        now=$(date +%s)
        [ $((end - now)) -gt 90 ] || break
        life=$((120 + (RANDOM % 180)))
        [ $((now + life)) -lt "$end" ] || life=$((end - now - 30))
        ip=${nodes[$(((l + i) % 3))]}
        TUTTI_TOKEN=$token "$bin" load --url "http://$ip:$http" --room "soak-$l-$i" -n "$per_lane" \
            --room-sizes "$sizes" --cint 100 --talkers 0.1 --life "$life" --warmup 5 --details 0 --room-details 0 \
            --rejoin-attempts 3 --report "$out/runs/lane$l-$i.json" >"$out/runs/lane$l-$i.log" 2>&1 || true
        i=$((i + 1))
        sleep $((RANDOM % 10))
    done
}
for l in $(seq 0 $((lanes - 1))); do
    lane "$l" &
    pids+=($!)
    sleep 7
done

echo "t,node,rss_bytes,fds,threads,participants,redis_keys,redis_leases,redis_memory" >"$out/samples.csv"
restarted=
restart_t=
while :; do
    now=$(date +%s)
    [ "$now" -lt "$end" ] || break
    t=$((now - t0))
    keys=$(redis-cli -p "$redis_port" dbsize 2>/dev/null || echo NA)
    # Live rooms' leases (a released room keeps a small epoch hash for a day: keys grow with new room names).
    leases=$(redis-cli -p "$redis_port" --scan --pattern 'tutti:lease:*' 2>/dev/null | wc -l)
    memory=$(redis-cli -p "$redis_port" info memory 2>/dev/null | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')
    for ip in "${nodes[@]}"; do
        m="$ip:$metrics"
        echo "$t,${ip##*.},$(metric "$m" process_resident_memory_bytes),$(metric "$m" process_open_fds),$(metric "$m" process_threads),$(metric "$m" tutti_mix_participants),$keys,$leases,${memory:-NA}" >>"$out/samples.csv"
    done
    if [ -z "$restarted" ] && [ "$t" -ge "$restart_at" ]; then
        restarted=1
        restart_t=$t
        ip=${nodes[2]}
        echo "$(date +%T) t=${t}s: SIGTERM to node ${ip##*.} (drain), then a restart"
        kill -TERM "${node_pid[$ip]}"
        for _ in $(seq 600); do kill -0 "${node_pid[$ip]}" 2>/dev/null || break; sleep 0.1; done
        wait "${node_pid[$ip]}" 2>/dev/null || true
        start_node "$ip"
        echo "$(date +%T) node ${ip##*.} up again"
    fi
    sleep "$sample"
done
wait "${pids[@]:1}" 2>/dev/null || true

echo
echo "== $duration s, $lanes lanes of $per_lane, restart of node 4 at ${restart_t:-never} s; samples: $out/samples.csv"
echo "| node | from t (s) | RSS MiB | fds | threads | to t (s) | RSS MiB | fds | threads | max RSS MiB |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for ip in "${nodes[@]}"; do
    n=${ip##*.}
    from=$warmup
    [ "$n" = 4 ] && [ -n "$restart_t" ] && from=$((restart_t + warmup))
    awk -F, -v n="$n" -v from="$from" 'NR > 1 && $2 == n && $1 >= from {
            if (!seen) { seen = 1; t0 = $1; r0 = $3; f0 = $4; h0 = $5 }
            t1 = $1; r1 = $3; f1 = $4; h1 = $5; if ($3 > mx) mx = $3 }
        END { if (seen) printf "| %s | %d | %.1f | %d | %d | %d | %.1f | %d | %d | %.1f |\n", n, t0, r0 / 1048576, f0, h0, t1, r1 / 1048576, f1, h1, mx / 1048576 }' \
        "$out/samples.csv"
done
awk -F, -v from="$warmup" 'NR > 1 && $1 >= from && $7 != "NA" { if (!seen) { seen = 1; k0 = $7; a = $7; b = $7 } k1 = $7; if ($7 < a) a = $7; if ($7 > b) b = $7 }
    END { printf "redis keys: %d after warm-up, %d at the end (min %d, max %d)\n", k0, k1, a, b }' "$out/samples.csv"
awk -F, -v from="$warmup" 'NR > 1 && $1 >= from && $8 != "" { if (!seen) { seen = 1; l0 = $8; m0 = $9 } l1 = $8; m1 = $9 }
    END { printf "redis leases (live rooms): %d after warm-up, %d at the end; used memory %.1f → %.1f MiB\n", l0, l1, m0 / 1048576, m1 / 1048576 }' "$out/samples.csv"
python3 - "$out/runs" <<'EOF'
import json, os, sys
d = sys.argv[1]
runs = clients = connected = failed = closed = lost = moved = invalid = 0
for f in sorted(os.listdir(d)):
    if not f.endswith(".json"):
        continue
    try:
        r = json.load(open(os.path.join(d, f)))
    except Exception as e:
        print(f"{f}: unreadable report ({e})")
        continue
    s = r.get("summary", r)
    runs += 1
    clients += s.get("clients", 0)
    connected += s.get("connected", 0)
    failed += s.get("join_failed", 0)
    closed += s.get("closed", 0)
    h = s.get("handover", {})
    lost += h.get("lost_calls", 0)
    moved += h.get("clients_moved", 0)
    invalid += 0 if s.get("valid", True) else 1
    if s.get("connected", 0) < s.get("clients", 0) or h.get("lost_calls", 0):
        print(f"{f}: {s.get('connected')} of {s.get('clients')} connected, {s.get('closed')} closed, {h.get('lost_calls', 0)} lost")
print(f"load runs: {runs}; clients {clients}, connected at the end {connected}, joins failed {failed}, closed {closed}; moved {moved}, lost calls {lost}; invalid runs {invalid}")
EOF
