#!/bin/bash
# The proxy's RSS under oversized requests (RELIABILITY.md, "Hostile clients"):
#   N=40 examples/memory/measure.sh target/debug/enforce [--responses]
# starts a Python upstream that answers after 2 s and `enforce serve` with cfg.yaml
# (max_concurrent: 4; CFG=cfg-checked.yaml adds a check the model is asked streamed for) on
# ports 18931/18932, sends N (default 40) concurrent 9 MB requests
# (chat completions; Responses API requests, stored, with --responses), and prints idle,
# peak and the RSS 3 s after the last answer.
#
# The peak is the kernel's high-water mark (VmHWM), reset once the proxy is idle
# (`/proc/PID/clear_refs`, Linux 4.0 and later): sampling VmRSS misses the short peaks (a
# 9 MB body is parsed in a few milliseconds), so sampled peaks differ from run to run by
# whether a sample fell on one.
set -u
BIN=$(realpath "$1")
cd "$(dirname "$0")"
OUT=$(mktemp -d)
python3 upstream.py 18931 & UP=$!
$BIN serve --config "${CFG:-cfg.yaml}" --listen 127.0.0.1:18932 >"$OUT/serve.log" 2>&1 & SRV=$!
sleep 2
kb() { awk -v key="$1:" '$1 == key {print $2}' /proc/$SRV/status; }
curl -s -o /dev/null http://127.0.0.1:18932/healthz
IDLE=$(kb VmRSS)
echo 5 >"/proc/$SRV/clear_refs" || echo "cannot reset the high-water mark: the peak may be the start's"
python3 load.py 18932 ${N:-40} 9000000 "${@:2}"
PEAK=$(kb VmHWM)
sleep 3
AFTER=$(kb VmRSS)
echo "idle_kb=$IDLE peak_kb=$PEAK after_kb=$AFTER"
kill $SRV $UP; wait 2>/dev/null
