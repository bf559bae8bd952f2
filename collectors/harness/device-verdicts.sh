#!/usr/bin/env bash
# The verdicts proof on a GPU host in one command (through the device tool): every workload of
# memscope_harness.verdicts under every setting, each in a fresh process under its memory limit;
# then --verify when BIN holds a memscope binary (it can run anywhere: the truth travels with the
# snapshots). Leaves the table, the truth files and the snapshots under $OUT.
#   BIN=target/device-bin collectors/harness/device-verdicts.sh
set -u
FINAL=${OUT:-/tmp/memscope-verdicts-out}
W=$(mktemp -d)
mkdir -p "$FINAL"
VERIFY=""
if [ -n "${BIN:-}" ] && [ -x "$BIN/memscope" ]; then
    VERIFY="--verify --memscope $(cd "$BIN" && pwd)/memscope"
fi
cd collectors/harness
python3 -m memscope_harness.verdicts --out "$W/runs" --parallel "${PARALLEL:-6}" \
    ${WORKLOADS:+--workloads "$WORKLOADS"} $VERIFY 2>&1 | tee "$FINAL/verdicts.txt"
echo "exit ${PIPESTATUS[0]}" >> "$FINAL/verdicts.txt"
cd "$W/runs"
tar cJf "$FINAL/verdicts-defaults.tar.xz" *.json *.default.pickle
tar cJf "$FINAL/verdicts-others.tar.xz" $(ls *.pickle | grep -v '\.default\.pickle$')
nvidia-smi -L > "$FINAL/gpus.txt"
