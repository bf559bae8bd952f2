#!/usr/bin/env bash
# The will-it-fit probes on a GPU host in one command (through the device tool): each probed
# workload recorded and run for real under further limits, on this GPU, then `memscope predict`
# from those recordings against those runs (--verify). Extra recordings at large sizes
# (RECORD_AT=W:S,...) show what a synthesized run got wrong. Leaves the table and the figures
# under $OUT.
#   BIN=target/device-bin collectors/harness/device-predict-probe.sh
set -u
FINAL=${OUT:-/tmp/memscope-predict-probe}
BIN=$(cd "${BIN:-target/release}" && pwd)/memscope
W=$(mktemp -d)
mkdir -p "$FINAL"
cd collectors/harness
python3 -m memscope_harness.predict --probe --out "$W/runs" --parallel "${PARALLEL:-4}" \
    --workloads "${WORKLOADS:-mlp_checkpoint_batch}" ${RECORD_AT:+--record-at "$RECORD_AT"} 2>&1 | tee "$FINAL/probe.txt"
python3 -m memscope_harness.predict --verify --out "$W/runs" --bin "$BIN" \
    --workloads "${WORKLOADS:-mlp_checkpoint_batch}" 2>&1 | tee "$FINAL/verify.txt"
echo "exit ${PIPESTATUS[0]}" >> "$FINAL/verify.txt"
cd "$W/runs"
tar cJf "$FINAL/probe.tar.xz" *.json *.pickle
nvidia-smi -L > "$FINAL/gpus.txt"
