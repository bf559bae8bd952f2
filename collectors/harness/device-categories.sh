#!/usr/bin/env bash
# The categories proof on a GPU host in one command (through the device tool): every workload of
# memscope_harness.categories with Python-only, C++ and Python, and no stacks, each in a fresh
# process; then --verify when BIN holds a memscope binary (it can run anywhere: the truth travels
# with the snapshots). Leaves the table, the truth files and the snapshots under $OUT.
#   BIN=target/device-bin collectors/harness/device-categories.sh
set -u
FINAL=${OUT:-/tmp/memscope-categories-out}
W=$(mktemp -d)
mkdir -p "$FINAL"
VERIFY=""
if [ -n "${BIN:-}" ] && [ -x "$BIN/memscope" ]; then
    VERIFY="--verify --memscope $(cd "$BIN" && pwd)/memscope"
fi
cd collectors/harness
python3 -m memscope_harness.categories --out "$W/runs" --parallel "${PARALLEL:-6}" \
    ${WORKLOADS:+--workloads "$WORKLOADS"} $VERIFY 2>&1 | tee "$FINAL/categories.txt"
echo "exit ${PIPESTATUS[0]}" >> "$FINAL/categories.txt"
cd "$W/runs"
tar cJf "$FINAL/categories.tar.xz" *.json *.pickle
nvidia-smi -L > "$FINAL/gpus.txt"
