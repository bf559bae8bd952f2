#!/usr/bin/env bash
# Issue 4's run on a real GPU, in one command (through the device tool): a memscope server, the
# collector reading NVML, and a PyTorch training loop with the agent (planted leak, induced OOM).
# Compares NVML's figures with nvidia-smi's, reads the live API, benchmarks the agent's overhead
# and the collector's CPU/RSS at 1 s and 100 ms, and leaves everything under $OUT (including the
# server's data folder, so the pages can be opened and screenshotted elsewhere).
#
#   BIN=.devbin OUT=/tmp/out collectors/device-e2e.sh
set -u
BIN=${BIN:-target/release}   # where memscope and memscope-collector are (cargo build --release)
FINAL=${OUT:-/tmp/memscope-device-out}
W=$(mktemp -d)
OUT=$W/out   # everything goes here, then into one tarball (the device tool brings back few files)
mkdir -p "$OUT" "$FINAL"
PORT=8080
URL=http://127.0.0.1:$PORT
export PYTHONPATH=$PWD/collectors/python
get() { python3 -c "import urllib.request,sys;sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())" "$1"; }
nvidia-smi --query-gpu=name,uuid,memory.used,memory.total,driver_version --format=csv > "$OUT/nvidia-smi-gpu.csv"

"$BIN/memscope" serve --addr 127.0.0.1:$PORT --data-dir "$W/data" --collector-token gpuhost=device-collector-token > "$OUT/server.log" 2>&1 &
SERVER=$!
"$BIN/memscope-collector" --server $URL --token device-collector-token --name gpuhost --interval-ms 200 --readings-per-batch 5 \
    --agent-dir "$W/agents" --spool-dir "$W/spool" > "$OUT/collector.log" 2>&1 &
COLLECTOR=$!
sleep 2

# The training job with the agent (relay through the collector; OOM snapshots straight to the server).
MEMSCOPE_AGENT_DIR="$W/agents" MEMSCOPE_SERVER=$URL MEMSCOPE_JOB=device-e2e MEMSCOPE_RANK=0 \
MEMSCOPE_INTERVAL_S=0.2 MEMSCOPE_SEGMENTS_INTERVAL_S=2 MEMSCOPE_RECORD_HISTORY=1 MEMSCOPE_MAX_ENTRIES=50000 \
MEMSCOPE_SNAPSHOT_DIR="$W" \
    python3 collectors/python/examples/train_with_agent.py --steps 150 --leak-mib 8 --oom > "$OUT/train.log" 2>&1 &
TRAIN=$!
# nvidia-smi while it runs, to compare with what the collector stored.
while kill -0 $TRAIN 2>/dev/null; do
    sleep 1
    echo "$(date +%s%3N) $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits) $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | tr '\n' ';')" >> "$OUT/nvidia-smi-during.txt"
done
wait $TRAIN
echo "train exit $?" >> "$OUT/train.log"
PID=$(grep -o 'pid [0-9]*' "$OUT/train.log" | tail -1 | cut -d' ' -f2)
sleep 4   # the collector's next batch carries the last agent files
HOST=$(cat /etc/hostname)
get $URL/api/live/fleet > "$OUT/fleet.json"
UUID=$(python3 -c "import json;print(json.load(open('$OUT/fleet.json'))['hosts'][0]['gpus'][0]['gpu']['uuid'])")
get "$URL/api/live/gpus/$UUID?minutes=3&points=600" > "$OUT/gpu.json"
get "$URL/api/live/processes/$HOST/$PID?minutes=3&points=600" > "$OUT/process.json"
get $URL/api/snapshots > "$OUT/snapshots.json"
get $URL/metrics > "$OUT/metrics.txt"
SNAP=$(python3 -c "import json;s=json.load(open('$OUT/snapshots.json'));print(s[0]['id'] if s else '')" 2>/dev/null)
[ -n "$SNAP" ] && get "$URL/api/snapshots/$SNAP" > "$OUT/oom-report.json"
echo "host=$HOST pid=$PID uuid=$UUID snapshot=$SNAP" > "$OUT/ids.txt"

kill $COLLECTOR; wait $COLLECTOR 2>/dev/null
kill $SERVER; wait $SERVER 2>/dev/null
tar czf "$OUT/data.tar.gz" -C "$W" data

# Collector cost on real NVML, 30 s each (the server is gone: it spools): 1 s and 100 ms, and
# at 1 s with NVML initialised without attaching GPUs / with one malloc arena (where the RSS goes).
measure() {  # label, interval, env...
    local label=$1 ms=$2; shift 2
    env "$@" "$BIN/memscope-collector" --server http://127.0.0.1:9 --token x --interval-ms $ms \
        --agent-dir "$W/agents2" --spool-dir "$W/spool-$label" > /dev/null 2>&1 &
    local C=$!
    sleep 30
    python3 - "$C" "$label" >> "$OUT/collector-cost.txt" <<'PY'
import os, sys
pid, label = sys.argv[1], sys.argv[2]
f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
ticks = int(f[11]) + int(f[12])
start = int(f[19])
up = float(open("/proc/uptime").read().split()[0])
hz = os.sysconf("SC_CLK_TCK")
alive = up - start / hz
st = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status"))
print(f"{label}: cpu {ticks / hz / alive * 100:.2f}% of a core over {alive:.1f} s, "
      f"VmHWM {st['VmHWM'].strip()}, VmRSS {st['VmRSS'].strip()}, RssAnon {st['RssAnon'].strip()}, "
      f"RssFile {st['RssFile'].strip()}, threads {st['Threads'].strip()}")
PY
    [ "$label" = "1s" ] && awk '/^[0-9a-f]/{name=$6} /^Rss:/{if($2>256) print $2" kB", name}' /proc/$C/smaps | sort -rn | head -12 > "$OUT/collector-smaps-1s.txt"
    kill $C
}
measure 1s 1000
measure 100ms 100
measure 1s-no-attach 1000 MEMSCOPE_NVML_NO_ATTACH=1
measure 1s-one-arena 1000 MALLOC_ARENA_MAX=1

python3 collectors/python/bench_agent.py --steps 300 > "$OUT/agent-overhead.json" 2> "$OUT/agent-overhead.err"
tar czf "$FINAL/all.tgz" -C "$W" out
echo finished
