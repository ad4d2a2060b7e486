#!/bin/bash
# The proxy's RSS under oversized requests (RELIABILITY.md, "Hostile clients"):
#   N=40 examples/memory/measure.sh target/debug/enforce [--responses]
# starts a Python upstream that answers after 2 s and `enforce serve` with cfg.yaml
# (max_concurrent: 4) on ports 18931/18932, sends N (default 40) concurrent 9 MB requests
# (chat completions; Responses API requests, stored, with --responses),
# samples VmRSS every 50 ms, and prints idle, peak and RSS 3 s after the last answer.
set -u
BIN=$(realpath "$1")
cd "$(dirname "$0")"
OUT=$(mktemp -d)
python3 upstream.py 18931 & UP=$!
$BIN serve --config cfg.yaml --listen 127.0.0.1:18932 >"$OUT/serve.log" 2>&1 & SRV=$!
sleep 2
rss() { awk '/VmRSS/{print $2}' /proc/$SRV/status; }
curl -s -o /dev/null http://127.0.0.1:18932/healthz
IDLE=$(rss)
PEAK=0
( while kill -0 $SRV 2>/dev/null; do r=$(rss); [ -n "$r" ] && echo $r; sleep 0.05; done ) > "$OUT/samples.txt" & SAMP=$!
python3 load.py 18932 ${N:-40} 9000000 "${@:2}"
sleep 3
AFTER=$(rss)
kill $SAMP; PEAK=$(sort -n "$OUT/samples.txt" | tail -1)
echo "idle_kb=$IDLE peak_kb=$PEAK after_kb=$AFTER"
kill $SRV $UP; wait 2>/dev/null
