#!/usr/bin/env bash
# Real-NVML check of memscope-collector (issue 4), run on the GPU machine.
set -u
export PYTHONUNBUFFERED=1
# Build here (cargo build --release; strip target/release/memscope target/release/memscope-collector), copy both into .devbin/, carry .devbin.
B=.devbin
echo "== nvidia-smi before"; nvidia-smi --query-gpu=uuid,name,memory.used,memory.total,memory.reserved --format=csv,noheader,nounits
$B/memscope serve --addr 127.0.0.1:18090 --data-dir /tmp/msd --collector-token gpu=device-collector-token > $OUT/serve.log 2>&1 &
sleep 1
python3 -c "import torch,time; x=torch.empty(3<<30, dtype=torch.uint8, device='cuda'); x.fill_(1); torch.cuda.synchronize(); print('holding 3 GiB, pid', __import__('os').getpid()); time.sleep(25)" &
sleep 6
echo "== collector: 30 readings at 100 ms"
$B/memscope-collector --server http://127.0.0.1:18090 --token device-collector-token --name gpu --interval-ms 100 --readings 30 --readings-per-batch 5 --spool-dir /tmp/spool 2>&1
echo "== nvidia-smi during"; nvidia-smi --query-gpu=uuid,memory.used,memory.total --format=csv,noheader,nounits
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits
python3 - <<'PY'
import sqlite3, json
db = sqlite3.connect('/tmp/msd/memscope.db')
print("gpus", db.execute("select uuid, idx, name, total_bytes from gpus").fetchall())
print("gpu_samples", db.execute("select count(*), max(used_bytes), max(reserved_bytes), max(temperature_c), max(power_mw) from gpu_samples").fetchall())
print("last gpu sample", db.execute("select time_ms, used_bytes, free_bytes, reserved_bytes, gpu_util, temperature_c, power_mw from gpu_samples order by time_ms desc limit 1").fetchall())
print("processes", db.execute("select pid, start_time_ms, name, cgroup, max(used_bytes), count(*) from process_samples group by pid").fetchall())
print("batches", db.execute("select count(*), sum(rows) from ingested_batches").fetchall())
PY
echo "== collector CPU and RSS"
python3 - <<'PY'
import os, resource, subprocess, time
for interval, n in ((100, 100), (1000, 10)):
    t = time.time()
    p = subprocess.Popen([".devbin/memscope-collector", "--server", "http://127.0.0.1:18090", "--token", "device-collector-token", "--name", "gpu",
                          "--interval-ms", str(interval), "--readings", str(n), "--readings-per-batch", "10", "--spool-dir", f"/tmp/spool{interval}"],
                         stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.time() - t
    cpu = ru.ru_utime + ru.ru_stime
    print(f"interval {interval} ms: {n} readings in {wall:.2f} s wall, cpu {cpu:.3f} s = {100*cpu/wall:.2f}% of a core, max RSS {ru.ru_maxrss/1024:.1f} MiB, exit {status}")
PY
kill %1 2>/dev/null; wait
