#!/usr/bin/env bash
# The harness on a GPU host, in one command (through the device tool): server + collector (NVML,
# relaying the agents), every scenario, --verify. Leaves the table, the truth files and the
# snapshots (future fixtures) in one tarball under $OUT.
#   collectors/harness/device-run.sh   (BIN=dir of the binaries, OUT=where the tarball goes)
set -u
BIN=${BIN:-target/release}   # where memscope and memscope-collector are (cargo build --release)
FINAL=${OUT:-/tmp/memscope-harness-out}
W=$(mktemp -d)
mkdir -p "$W/out" "$FINAL"
PORT=8080
"$BIN/memscope" serve --addr 127.0.0.1:$PORT --data-dir "$W/data" --collector-token harness=device-collector-token > "$W/out/server.log" 2>&1 &
SERVER=$!
"$BIN/memscope-collector" --server http://127.0.0.1:$PORT --token device-collector-token --name harness --interval-ms 200 \
    --readings-per-batch 5 --agent-dir "$W/agents" --spool-dir "$W/spool" > "$W/out/collector.log" 2>&1 &
COLLECTOR=$!
sleep 2
cd collectors/harness
python3 -m memscope_harness --server http://127.0.0.1:$PORT --agent-dir "$W/agents" --out "$W/out/run" \
    --scenario "${SCENARIO:-all}" --verify 2>&1 | tee "$W/out/harness.txt"
echo "exit ${PIPESTATUS[0]}" >> "$W/out/harness.txt"
cd - > /dev/null
kill $COLLECTOR $SERVER; wait 2>/dev/null
nvidia-smi -L > "$W/out/gpus.txt"
tar czf "$FINAL/harness.tgz" -C "$W" out data
