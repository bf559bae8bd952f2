#!/usr/bin/env bash
# The what-if proof on a GPU host in one command (through the device tool): every workload of
# memscope_harness.whatif under every setting, without and with a per-process limit, each in a
# fresh process; then --verify: memscope whatif's predictions from each workload's default run
# against the real runs, and the replay check of every recorded run. Leaves the table, the real
# figures (JSON) and the traces under $OUT.
#   BIN=target/device-bin collectors/harness/device-whatif.sh
set -u
BIN=${BIN:-target/release}
FINAL=${OUT:-/tmp/memscope-whatif-out}
W=$(mktemp -d)
mkdir -p "$FINAL"
M=$(cd "$BIN" && pwd)/memscope
cd collectors/harness
python3 -m memscope_harness.whatif --out "$W/runs" --memscope "$M" --parallel "${PARALLEL:-6}" \
    ${WORKLOADS:+--workloads "$WORKLOADS"} --verify 2>&1 | tee "$FINAL/whatif.txt"
echo "exit ${PIPESTATUS[0]}" >> "$FINAL/whatif.txt"
cd "$W/runs"
tar cJf "$FINAL/whatif-defaults.tar.xz" *.json *.default.pickle
tar cJf "$FINAL/whatif-others.tar.xz" $(ls *.pickle | grep -v '\.default\.pickle$')
nvidia-smi -L > "$FINAL/gpus.txt"
