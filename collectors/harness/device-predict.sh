#!/usr/bin/env bash
# The will-it-fit sweep on a GPU host in one command (through the device tool): every workload of
# memscope_harness.predict recorded at its small sizes and run for real at larger ones, then all
# again under a memory fraction between two of the real peaks. Leaves the table, the figures
# (JSON) and the recordings under $OUT.
#   collectors/harness/device-predict.sh
set -u
FINAL=${OUT:-/tmp/memscope-predict-out}
W=$(mktemp -d)
mkdir -p "$FINAL"
cd collectors/harness
python3 -m memscope_harness.predict --out "$W/runs" --parallel "${PARALLEL:-4}" \
    ${WORKLOADS:+--workloads "$WORKLOADS"} 2>&1 | tee "$FINAL/predict.txt"
echo "exit ${PIPESTATUS[0]}" >> "$FINAL/predict.txt"
cd "$W/runs"
tar cJf "$FINAL/predict.tar.xz" *.json *.pickle
nvidia-smi -L > "$FINAL/gpus.txt"
