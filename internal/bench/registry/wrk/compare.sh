#!/bin/bash
# The second loader of docs/benchmarks.md (issue 16): wrk with a Lua script
# against a fresh server, printing wrk's figures, the loader's and the
# server's CPU seconds and the load average into $OUT/wrk-LABEL.txt.
#
# usage: compare.sh BIN LABEL register|query|querygz    (needs wrk, curl, python3)
#   register: single-instance registers, 256 connections (register.lua)
#   query:    the query scenario's GET, 64 connections (query.lua); querygz with gzip
set -eu
BIN=$1; LABEL=$2; MODE=$3
D=${OUT:-/tmp}/data-$LABEL; rm -rf $D
$BIN server --data $D --http 127.0.0.1:7444 --xds '' --log-level warn 2>${OUT:-/tmp}/server-$LABEL.log &
SP=$!
for i in $(seq 100); do curl -sf http://127.0.0.1:7444/readyz >/dev/null && break; sleep 0.1; done
cpu() { curl -s http://127.0.0.1:7444/metrics | awk '/^process_cpu_seconds_total/{print $2}'; }
export WRK_NS=wrk
if [ $MODE = register ]; then S=register.lua; C=256; else
  $BIN bench registry --server http://127.0.0.1:7444 --scenarios query --duration 1s -q --keep --namespace wrk >/dev/null
  S=query.lua; C=64
  if [ $MODE = querygz ]; then export WRK_GZIP=1; fi
fi
L0=$(cut -d' ' -f1 /proc/loadavg)
c0=$(cpu)
python3 -c "
import resource,subprocess,sys
subprocess.run(sys.argv[1:])
r=resource.getrusage(resource.RUSAGE_CHILDREN); print('loader_cpu_seconds %.2f' % (r.ru_utime+r.ru_stime))" wrk -t2 -c$C -d10s --latency -s $(dirname "$0")/$S http://127.0.0.1:7444 > ${OUT:-/tmp}/wrk-$LABEL.txt 2>&1
c1=$(cpu)
echo "server_cpu_seconds $(python3 -c "print(round($c1-$c0,2))") load $L0 -> $(cut -d' ' -f1 /proc/loadavg)" >> ${OUT:-/tmp}/wrk-$LABEL.txt
if [ $MODE = register ]; then echo "instances $(curl -s http://127.0.0.1:7444/v1/namespaces/wrk/services | grep -o '"instances":[0-9]*' | cut -d: -f2 | paste -sd+ | bc)" >> ${OUT:-/tmp}/wrk-$LABEL.txt; fi
kill $SP; wait $SP || true
