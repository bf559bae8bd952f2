"""Compares what memscope stored from NVML with nvidia-smi's readings taken at the same moments
(collectors/device-e2e.sh writes both: the server's data folder and nvidia-smi-during.txt).

    python3 bench/compare_nvidia_smi.py DATA_DIR/memscope.db nvidia-smi-during.txt
"""
import sqlite3
import sys

db = sqlite3.connect(sys.argv[1])
print("time_ms        | nvidia-smi used MiB | memscope used MiB (dt ms) | nvidia-smi process pid:MiB | memscope process pid:MiB (dt ms)")
worst = 0.0
for line in open(sys.argv[2]):
    parts = line.split(None, 2)
    t, smi = int(parts[0]), int(parts[1])
    procs = [p.strip() for p in (parts[2] if len(parts) > 2 else "").split(";") if p.strip()]
    g = db.execute("SELECT time_ms, used_bytes FROM gpu_samples ORDER BY abs(time_ms - ?) LIMIT 1", (t,)).fetchone()
    ours = g[1] / 2**20
    worst = max(worst, abs(ours - smi))
    cells = []
    for p in procs:
        pid, used = [int(x) for x in p.split(",")]
        r = db.execute("SELECT time_ms, used_bytes FROM process_samples WHERE pid = ? ORDER BY abs(time_ms - ?) LIMIT 1",
                       (pid, t)).fetchone()
        cells.append(f"{pid}:{r[1] / 2**20:.0f} ({r[0] - t:+d})" if r else f"{pid}: none")
        if r:
            worst = max(worst, abs(r[1] / 2**20 - used))
    print(f"{t} | {smi:>19} | {ours:>17.1f} ({g[0] - t:+d}) | {', '.join(procs) or '-':>26} | {', '.join(cells) or '-'}")
print(f"largest difference: {worst:.1f} MiB (nvidia-smi rounds to whole MiB)")
