"""memscope's on-device harness: planted memory behaviours on a real GPU (scenarios.py), run with
the agent attached and verified against what the server finds (verify.py).
`python -m memscope_harness --help`."""


def load(out, name):
    """A run's ``NAME.json`` under `out`, or None when the run wrote none (it failed)."""
    import json
    import os
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def planted_line(path, name):
    """The line of `path` that ends with `# PLANT: name`: the truth names planted lines by marker,
    so it stays right when the code moves."""
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if line.rstrip().endswith("# PLANT: " + name):
                return i
    raise LookupError(name)


def run_each(module, doc, workloads, run):
    """The command line of a harness whose workloads each run in a process of their own:
    ``python -m MODULE --out DIR [--workloads a,b]`` starts one process per workload (a fresh
    allocator each), which calls ``run(workload, out)``. Exits non-zero if any failed."""
    import argparse
    import os
    import subprocess
    import sys
    ap = argparse.ArgumentParser(prog="python -m " + module, description=doc.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--workloads", default=",".join(workloads))
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.one:
        run(a.one, a.out)
        return
    failed = 0
    for w in a.workloads.split(","):
        r = subprocess.run([sys.executable, "-m", module, "--out", a.out, "--one", w])
        failed += r.returncode != 0
    sys.exit(1 if failed else 0)
