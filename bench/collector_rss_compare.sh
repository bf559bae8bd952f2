#!/usr/bin/env bash
# RSS and CPU of NVML samplers on one GPU host, 30 s each at 1 s: memscope-collector, NVIDIA's own
# nvidia-smi query loop, a bare pynvml loop, and nvmlInit alone in a bare Python.
set -u
# Run from the repository root on a GPU host: BIN=target/release bench/collector_rss_compare.sh
BIN=${BIN:-target/release}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; W=$(mktemp -d)
report() {  # label pid
python3 - "$2" "$1" <<'PY'
import os, sys
pid, label = sys.argv[1], sys.argv[2]
f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
hz = os.sysconf("SC_CLK_TCK"); up = float(open("/proc/uptime").read().split()[0])
alive = up - int(f[19]) / hz; cpu = (int(f[11]) + int(f[12])) / hz / alive * 100
st = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status"))
print(f"{label:28s} cpu {cpu:5.2f}%  VmHWM {st['VmHWM'].strip():>10s}  VmRSS {st['VmRSS'].strip():>10s}  RssAnon {st['RssAnon'].strip():>10s}  RssFile {st['RssFile'].strip():>10s}  threads {st['Threads'].strip()}")
PY
}
run() {  # label, command...
    local label=$1; shift
    "$@" > /dev/null 2>&1 &
    local P=$!; sleep 30; report "$label" $P; kill $P; wait $P 2>/dev/null
}
{
echo "# $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
run memscope-collector "$BIN/memscope-collector" --server http://127.0.0.1:9 --token x --interval-ms 1000 --agent-dir $W/a --spool-dir $W/s
run "nvidia-smi -lms 1000" nvidia-smi --query-gpu=memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw --format=csv -lms 1000
run "nvidia-smi pmon (procs)" nvidia-smi pmon -d 1
run "python3 pynvml loop" python3 -c "
import time, pynvml as n
n.nvmlInit(); hs=[n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
while True:
    for h in hs: n.nvmlDeviceGetMemoryInfo(h); n.nvmlDeviceGetUtilizationRates(h); n.nvmlDeviceGetTemperature(h,0); n.nvmlDeviceGetPowerUsage(h); n.nvmlDeviceGetComputeRunningProcesses(h)
    time.sleep(1)"
run "python3 (no NVML)" python3 -c "import time
while True: time.sleep(1)"
run "python3 nvmlInit only" python3 -c "
import ctypes, time; ctypes.CDLL('libnvidia-ml.so.1').nvmlInit_v2()
while True: time.sleep(1)"
} | tee "$OUT/rss-compare.txt"
