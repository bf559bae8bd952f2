"""Engine benchmark (issue 2): memscope's parse + all analyses vs Python's pickle.load, same file,
same run, same machine. Prints a table and writes bench/results-engine.json. Beside them, the
floor under any one-thread parse of the same file (`opcode_floor`: every opcode walked, nothing
decoded) and the parse's time over it.

    python3 bench/engine.py FILE [FILE ...]

For each file, REPEATS (default 3) child processes each (best of them in the figures, and the
CLI's and `pickle.load`'s min / median / max): `memscope analyze --json FILE`
(the CLI as a user runs it: read, index, every analysis, the JSON report), the engine example
(parse and analyses timed apart, plus the views the dashboard opens with), and Python's
`pickle.load`; the speedups are against `pickle.load` measured in the same run (best against best, and
median against median). The CLI's RSS is the highest of its runs.

Each measurement runs in its own child process; peak RSS is that child's own ru_maxrss (wait4).
The big snapshot is made on a GPU host with bench/make_big_snapshot.py (see bench/README.md).

On a machine without cargo (a GPU host, bench/record_real.py): MEMSCOPE_BIN, BENCH_BIN and
FLOOR_BIN name binaries built elsewhere and nothing is built. ENGINE_CPUS (`0,1`) runs every
child under `taskset -c`, so that a many-core host measures the two cores the issue's goals are
set on. RESULTS names the JSON written (default bench/results-engine.json).
"""
import json, os, shutil, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.environ.get("BENCH_BIN", os.path.join(ROOT, "target", "release", "examples", "bench"))
# The floor under any one-thread parse: every opcode walked, nothing decoded (opcode_floor.rs).
FLOOR = os.environ.get("FLOOR_BIN", os.path.join(ROOT, "target", "release", "examples", "opcode_floor"))
# The CLI as users run it (issue 14's figure): `memscope analyze --json FILE`, output discarded.
MEMSCOPE = os.environ.get("MEMSCOPE_BIN", os.path.join(ROOT, "target", "release", "memscope"))
REPEATS = int(os.environ.get("REPEATS", "3"))
PIN = ["taskset", "-c", os.environ["ENGINE_CPUS"]] if os.environ.get("ENGINE_CPUS") else []
if PIN and not shutil.which("taskset"):
    sys.exit("ENGINE_CPUS needs taskset (util-linux)")
RESULTS = os.environ.get("RESULTS", os.path.join(ROOT, "bench", "results-engine.json"))


def child(argv):
    """Runs argv, returns (wall seconds, peak RSS bytes, stdout)."""
    t = time.perf_counter()
    p = subprocess.Popen(PIN + argv, stdout=subprocess.PIPE)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    if status != 0:
        sys.exit(f"{argv} failed with {status}")
    return wall, ru.ru_maxrss * 1024, out


def spread(runs):
    """min / median / max of a list of seconds, as text."""
    return " / ".join(f"{v:.3f}" for v in (min(runs), statistics.median(runs), max(runs)))


def decompressed(path):
    """Python's pickle.load needs the plain pickle: decompress .xz/.gz next to it once."""
    if path.endswith(".xz") or path.endswith(".gz"):
        plain = path.rsplit(".", 1)[0]
        if not os.path.exists(plain):
            import gzip, lzma
            opener = lzma.open if path.endswith(".xz") else gzip.open
            with opener(path) as f, open(plain, "wb") as g:
                g.write(f.read())
        return plain
    return path


def main():
    if "BENCH_BIN" not in os.environ:
        subprocess.run(["cargo", "build", "-q", "--release", "-p", "snapshot", "--example", "bench",
                        "--example", "opcode_floor"], cwd=ROOT, check=True)
    if "MEMSCOPE_BIN" not in os.environ:
        subprocess.run(["cargo", "build", "-q", "--release", "-p", "server", "--bin", "memscope"], cwd=ROOT, check=True)
    rows = []
    for path in sys.argv[1:]:
        plain = decompressed(path)
        ours = None
        for _ in range(REPEATS):
            _, rss, out = child([BENCH, plain])
            r = json.loads(out)
            r["peak_rss_bytes"] = rss
            if ours is None or r["total_s"] < ours["total_s"]:
                ours = r
        cli_runs, cli_rss = [], 0
        for _ in range(REPEATS):
            s, rss, _ = child([MEMSCOPE, "analyze", "--json", plain])
            cli_runs.append(s)
            cli_rss = max(cli_rss, rss)
        cli_s = min(cli_runs)
        py_runs, py_rss = [], 0
        for _ in range(REPEATS):
            _, rss, out = child([sys.executable, "-c",
                "import pickle,sys,time; t=time.perf_counter(); pickle.load(open(sys.argv[1],'rb')); print(time.perf_counter()-t)", plain])
            py_runs.append(float(out))
            py_rss = max(py_rss, rss)
        py_s = min(py_runs)
        _, _, out = child([FLOOR, plain, str(REPEATS)])
        floor_s = json.loads(out)["walk_s"]
        size = os.path.getsize(plain)
        rows.append(dict(
            file=os.path.basename(plain), file_mb=size / 1e6, entries=ours["entries"],
            memscope_s=ours["total_s"], parse_s=ours["parse_s"], analyses_s=ours["analyses_s"],
            mb_per_s=size / 1e6 / ours["total_s"], python_pickle_load_s=py_s, speedup=py_s / ours["total_s"],
            cli_analyze_json_s=cli_s, cli_speedup=py_s / cli_s, cli_rss_mb=cli_rss / 1e6,
            cli_rss_over_file=cli_rss / size,
            memscope_rss_mb=ours["peak_rss_bytes"] / 1e6, rss_over_file=ours["peak_rss_bytes"] / size,
            python_rss_mb=py_rss / 1e6, python_rss_over_file=py_rss / size,
            model_bytes_per_entry=ours["model_bytes_per_entry"], tables_bytes_per_entry=ours["tables_bytes_per_entry"],
            cli_s_min_median_max=spread(cli_runs), pickle_load_s_min_median_max=spread(py_runs),
            cli_speedup_median=statistics.median(py_runs) / statistics.median(cli_runs),
            opcode_floor_s=floor_s, parse_over_floor=ours["parse_s"] / floor_s))
    keys = ["file", "file_mb", "entries", "cli_analyze_json_s", "cli_speedup", "cli_rss_mb", "cli_rss_over_file",
            "memscope_s", "parse_s", "analyses_s", "mb_per_s", "python_pickle_load_s",
            "speedup", "memscope_rss_mb", "rss_over_file", "python_rss_mb", "python_rss_over_file",
            "model_bytes_per_entry", "tables_bytes_per_entry", "cli_s_min_median_max",
            "pickle_load_s_min_median_max", "cli_speedup_median", "opcode_floor_s", "parse_over_floor"]
    for r in rows:
        print()
        for k in keys:
            v = r[k]
            print(f"  {k:24} {v:.3f}" if isinstance(v, float) else f"  {k:24} {v}")
    json.dump(rows, open(RESULTS, "w"), indent=1)


if __name__ == "__main__":
    main()
