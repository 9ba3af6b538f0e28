#!/bin/bash
# The figures of record of docs/benchmarks.md (issue 16): ROUNDS rounds of
# every registry target, each scenario on a fresh server, then a summary of
# medians. In a round: register, batch, query and gzip query with the bench
# (server CPU from /proc, the loader's from the bench's JSON), the same three
# with wrk (compare.sh), then memory and restart: 210,000 instances loaded
# over the API (the changes scenario with --keep), RSS 3 s after, a clean
# stop, the time from exec to /readyz = 200, RSS 3 s after ready.
#
# usage: round.sh BIN [ROUNDS]    (needs wrk, curl, python3; Linux /proc)
#   BIN is the server binary; the loader is BIN too unless LOADER is set.
#   Raw output goes to $OUT (default /tmp/sextant-round), the summary to stdout.
set -eu
BIN=$(realpath "$1"); ROUNDS=${2:-3}; LOADER=${LOADER:-$BIN}
OUT=${OUT:-/tmp/sextant-round}; mkdir -p "$OUT"; export OUT
HERE=$(cd "$(dirname "$0")" && pwd)
ADDR=127.0.0.1:17600
RAW=$OUT/round.txt; : > "$RAW"

start() { # start DIR: a server on $ADDR over DIR, ready
	$BIN server --data "$1" --http $ADDR --xds '' --log-level warn >>"$OUT/server.log" 2>&1 &
	PID=$!
	for _ in $(seq 300); do curl -sf -o /dev/null http://$ADDR/readyz && return; sleep 0.05; done
	echo "server on $ADDR not ready" >&2; exit 1
}
stop() { kill "$PID"; wait "$PID" || true; }
ticks() { awk '{print $14 + $15}' /proc/$PID/stat; } # user + system, in clock ticks
hz=$(getconf CLK_TCK)

bench() { # bench LABEL SCENARIO [FLAGS...]: one scenario on a fresh server
	local label=$1 s=$2; shift 2
	rm -rf "$OUT/data"; start "$OUT/data"
	local t0; t0=$(ticks)
	$LOADER bench registry -q --keep --server http://$ADDR --scenarios "$s" --duration 10s "$@" >"$OUT/bench.json"
	local t1; t1=$(ticks)
	stop
	python3 - "$label" "$(( t1 - t0 ))" "$hz" "$OUT/bench.json" >>"$RAW" <<'PY'
import json, sys
name, ticks, hz, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
for v in json.load(open(path)).values():
    if isinstance(v, dict) and "items" in v:
        print(f"bench {name} per_s={v['per_second']:.0f} p99_ms={v['p99_ms']} loader_s={v['loader_cpu_seconds']} server_s={ticks / hz:.2f} items={v['items']}")
PY
}

memory() {
	rm -rf "$OUT/data"; start "$OUT/data"
	$LOADER bench registry -q --keep --server http://$ADDR --scenarios changes --changes-total 205000 --changes-rounds 5 >/dev/null
	sleep 3
	local rss hwm; rss=$(awk '/VmRSS/{print $2}' /proc/$PID/status); hwm=$(awk '/VmHWM/{print $2}' /proc/$PID/status)
	local a b c d; a=$(date +%s.%N); stop; b=$(date +%s.%N)
	c=$(date +%s.%N); start "$OUT/data"; d=$(date +%s.%N)
	sleep 3
	local rss2; rss2=$(awk '/VmRSS/{print $2}' /proc/$PID/status)
	stop
	python3 -c "print('memory rss_mb=%d peak_mb=%d stop_s=%.2f restart_s=%.2f rss_after_restart_mb=%d' % ($rss/1024, $hwm/1024, $b-$a, $d-$c, $rss2/1024))" >>"$RAW"
}

for r in $(seq "$ROUNDS"); do
	echo "round $r (load $(cut -d' ' -f1 /proc/loadavg))" >&2
	bench register register
	bench batch batch
	bench query query
	bench querygz query --query-gzip
	for m in register query querygz; do
		"$HERE/compare.sh" "$BIN" "r$r-$m" "$m" >/dev/null
		f=$OUT/wrk-r$r-$m.txt
		echo "wrk $m per_s=$(awk '/Requests\/sec/{print $2}' "$f") p99_ms=$(awk '$1=="99%"{v=$2; if (v ~ /ms$/) sub(/ms$/,"",v); else if (v ~ /us$/) {sub(/us$/,"",v); v/=1000} else {sub(/s$/,"",v); v*=1000}; print v; exit}' "$f") loader_s=$(awk '/loader_cpu_seconds/{print $2}' "$f") server_s=$(awk '/server_cpu_seconds/{print $2}' "$f")" >>"$RAW"
		rm -rf "$OUT/data-r$r-$m"
	done
	memory
done

python3 - "$RAW" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    kind, name, *rest = line.split()
    if kind == "memory":
        rest, name = [name] + rest, ""
    rows.setdefault((kind + " " + name).strip(), []).append(dict(kv.split("=") for kv in rest))
for name, runs in rows.items():
    cols = runs[0].keys()
    out = []
    for c in cols:
        vals = [r[c] for r in runs]
        try:
            med = statistics.median(float(v) for v in vals)
            shown = f"{med:,.0f}" if med >= 100 else f"{med:g}"
            out.append(f"{c} {shown} ({' / '.join(vals)})")
        except ValueError:
            out.append(f"{c} {' / '.join(vals)}")
    print(f"{name}: median " + "; ".join(out))
PY
