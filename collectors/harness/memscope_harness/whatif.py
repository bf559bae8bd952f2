"""The what-if proof: ``python -m memscope_harness.whatif --out DIR [--memscope BIN] [--verify]``

Runs each workload below under each allocator setting, every run in a fresh process (the
allocator reads ``PYTORCH_CUDA_ALLOC_CONF`` once, at CUDA start), with and without a per-process
memory limit, and records what PyTorch's allocator really did (``torch.cuda.memory_stats``: peak
reserved bytes, cudaMalloc count, retries, OOM) and the trace (a memory snapshot). ``--verify``
then asks ``memscope whatif`` to predict every run from the trace of the workload's run under
PyTorch's defaults without a limit, and prints predicted against real (exit status 1 when a
prediction is off). The defaults' traces are the fixtures CI re-checks without a GPU.

One run: ``python -m memscope_harness.whatif run WORKLOAD --conf CONF [--limit-bytes N] --out DIR``.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

MIB = 1 << 20

# Settings each workload runs under; garbage collection acts only under a memory fraction.
SETTINGS = ["", "expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4",
            "garbage_collection_threshold:0.8,max_split_size_mb:128"]


# ---- workloads: deterministic programs whose allocations do not depend on the allocator ----------

def transformer(torch, step):
    """A small transformer encoder, training steps with a varying sequence length."""
    g = torch.Generator().manual_seed(1)
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 4).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for i in range(24):
        seq = int(torch.randint(64, 1024, (1,), generator=g))
        x = torch.randn(8, seq, 512, device="cuda")
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step(i)


def convnet(torch, step):
    """A conv net at a varying input resolution (detection-style multi-scale training). Small
    enough that no setting fills the device (a full device retries in ways no limit explains)."""
    g = torch.Generator().manual_seed(2)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 128, 3, padding=1, stride=2), torch.nn.ReLU(),
        torch.nn.Conv2d(128, 256, 3, padding=1, stride=2), torch.nn.ReLU(),
        torch.nn.Conv2d(256, 256, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(256, 10)).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for i in range(30):
        side = 32 * int(torch.randint(8, 24, (1,), generator=g))
        x = torch.randn(4, 3, side, side, device="cuda")
        net(x).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step(i)


def kv_cache(torch, step):
    """Generation with a growing key/value cache (torch.cat per token), several sequences."""
    for s in range(6):
        k = torch.zeros(16, 8, 0, 128, device="cuda", dtype=torch.float16)
        v = torch.zeros_like(k)
        for t in range(160):
            new = torch.randn(16, 8, 1, 128, device="cuda", dtype=torch.float16)
            k = torch.cat([k, new], dim=2)
            v = torch.cat([v, new], dim=2)
            torch.matmul(new, k.transpose(-1, -2))
        del k, v
        step(s)


def random_sizes(torch, step):
    """Allocations of random sizes (bytes to hundreds of MiB), freed in random order."""
    import random
    rnd = random.Random(3)
    live = []
    for i in range(3000):
        if live and rnd.random() < 0.48:
            live.pop(rnd.randrange(len(live)))
        else:
            n = int(math.exp(rnd.uniform(math.log(256), math.log(300 * MIB))))
            live.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
        if i % 500 == 0:
            step(i // 500)


def side_streams(torch, step):
    """Work on two side streams with record_stream: frees that wait for another stream."""
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for i in range(40):
        xs = []
        for j, s in enumerate(streams):
            x = torch.empty((8 + 3 * j + i % 5) * MIB, dtype=torch.uint8, device="cuda")
            with torch.cuda.stream(s):
                torch.cuda._sleep(200_000)
                x.add_(1)
            x.record_stream(s)
            xs.append(x)
        y = torch.empty(12 * MIB, dtype=torch.uint8, device="cuda")
        # The frees wait for the side streams' events; synchronising makes those complete before
        # the next request (which collects them), so every run sees the same order.
        torch.cuda.synchronize()
        del xs, y
        torch.cuda.synchronize()
        step(i)


def cuda_graph(torch, step):
    """A captured graph (its private pool) replayed while eager work goes on around it."""
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
    static_x = torch.randn(256, 1024, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = model(static_x)
    for i in range(20):
        static_x.copy_(torch.randn(256, 1024, device="cuda"))
        g.replay()
        extra = torch.empty((4 + i % 7) * MIB, dtype=torch.uint8, device="cuda")
        del extra
        step(i)
    del static_y


def near_limit(torch, step):
    """Growing then shrinking buffers of many sizes, the pattern that runs out of memory by
    default under a tight limit while expandable segments fit."""
    bufs = []
    for i in range(40):
        bufs.append(torch.empty((3 + (i * 7) % 11) * MIB + (i % 3) * 100_000, dtype=torch.uint8, device="cuda"))
        if i % 4 == 3:
            bufs.pop(0)
            bufs.pop(len(bufs) // 2)
        step(i)
    for i in range(30):
        bufs.append(torch.empty((9 + i % 13) * MIB, dtype=torch.uint8, device="cuda"))
        bufs.pop(0)
        step(40 + i)


def punched(torch, step):
    """The harness's OOM by fragmentation as a fixed program: 304 blocks of 6 MiB (102 segments of
    20 MiB by default, just under 2 GiB), two of every three freed, then ten 24 MiB blocks. Under
    its 2 GiB limit (`FIXED_LIMITS`) the defaults run out of memory at the first: no hole fits and
    no segment is wholly free to release. Expandable segments unmap the freed pages and fit."""
    blocks = [torch.empty(6 * MIB, dtype=torch.uint8, device="cuda") for _ in range(304)]
    step(0)
    keep = [b for i, b in enumerate(blocks) if i % 3 == 1]
    del blocks
    step(1)
    big = []
    for i in range(10):
        big.append(torch.empty(24 * MIB, dtype=torch.uint8, device="cuda"))
        step(2 + i)
    del keep, big


WORKLOADS = {"transformer": transformer, "convnet": convnet, "kv_cache": kv_cache, "random_sizes": random_sizes,
             "side_streams": side_streams, "cuda_graph": cuda_graph, "near_limit": near_limit,
             "punched": punched}


# Workloads whose limit is part of the program (what they plant only happens under it).
FIXED_LIMITS = {"punched": 2 << 30}


def limit_for(out, workload):
    """A per-process limit that makes the settings matter: the workload's own (`FIXED_LIMITS`),
    else halfway between the peak reserved bytes of its runs under expandable segments and under
    the defaults (when they differ by more than 64 MiB), else 90% of the defaults' peak. From
    phase one's real runs."""
    if workload in FIXED_LIMITS:
        return FIXED_LIMITS[workload]
    def peak(conf):
        with open(os.path.join(out, run_name(workload, conf, None) + ".json")) as f:
            return json.load(f)["peak_reserved_bytes"]
    default, expandable = peak(""), peak("expandable_segments:True")
    if default - expandable > 64 * MIB:
        return (default + expandable) // 2
    return default * 9 // 10


def one_run(args):
    """Runs one workload under the settings in the environment; writes NAME.json (+ .pickle)."""
    import torch
    torch.cuda.init()
    total = torch.cuda.mem_get_info()[1]
    if args.limit_bytes:
        torch.cuda.set_per_process_memory_fraction(args.limit_bytes / total)
    # Python stacks only: the replay needs sizes and order; the files stay small enough to keep.
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    steps = [0]
    oom = None
    try:
        WORKLOADS[args.workload](torch, lambda i: steps.__setitem__(0, i))
    except torch.OutOfMemoryError as e:
        oom = {"step": steps[0], "message": str(e).split("\n")[0][:300]}
    torch.cuda.synchronize()
    st = torch.cuda.memory_stats()
    base = os.path.join(args.out, args.name)
    torch.cuda.memory._dump_snapshot(base + ".pickle")
    torch.cuda.memory._record_memory_history(enabled=None)
    with open(base + ".json", "w") as f:
        json.dump({"workload": args.workload, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                   "limit_bytes": args.limit_bytes,
                   # What the allocator's limit really is (`fraction * total`, as PyTorch computes it).
                   "allowed_bytes": int(args.limit_bytes / total * total) if args.limit_bytes else None,
                   "device_total_bytes": total, "torch": torch.__version__,
                   "peak_reserved_bytes": st.get("reserved_bytes.all.peak", 0),
                   "peak_allocated_bytes": st.get("allocated_bytes.all.peak", 0),
                   "peak_requested_bytes": st.get("requested_bytes.all.peak", 0),
                   "segments_at_end": st.get("segment.all.current", 0),
                   "cuda_mallocs": st.get("num_device_alloc", 0), "cuda_frees": st.get("num_device_free", 0),
                   "alloc_retries": st.get("num_alloc_retries", 0), "ooms": st.get("num_ooms", 0),
                   "oom": oom}, f, indent=1)


def run_name(workload, conf, limit):
    tag = conf.replace(":", "_").replace(",", "+").replace("[", "").replace("]", "").replace(">", "gt") or "default"
    return "%s.%s%s" % (workload, tag, ".limit" if limit else "")


def run_all(args):
    """Phase one: every workload under every setting without a limit. Phase two: under a limit
    set from phase one's figures (`limit_for`), every setting again."""
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    first = [(w, c, None) for w in args.workloads for c in SETTINGS if "garbage_collection" not in c]
    run_jobs(args, first)
    limits = {w: limit_for(args.out, w) for w in args.workloads}
    with open(os.path.join(args.out, "limits.json"), "w") as f:
        json.dump(limits, f, indent=1)
    run_jobs(args, [(w, c, limits[w]) for w in args.workloads for c in SETTINGS])
    print("%d runs in %.0f s" % (len(first) + len(args.workloads) * len(SETTINGS), time.time() - t0), flush=True)


def harness_env():
    """This process's environment with the harness on PYTHONPATH: what each run's process gets."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                         env.get("PYTHONPATH", "")])
    return env


def spawn_all(commands, parallel):
    """Runs each `(name, argv, env)` in a process of its own, `parallel` at a time; says which
    failed, with their output's end."""
    running = []
    for name, cmd, env in commands:
        running.append((name, subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                               text=True)))
        while len(running) >= parallel:
            running = reap(running)
    while running:
        running = reap(running)


def run_jobs(args, jobs):
    env0 = harness_env()

    def commands():
        for w, conf, limit in jobs:
            name = run_name(w, conf, limit)
            cmd = [sys.executable, "-m", "memscope_harness.whatif", "run", w, "--name", name, "--out", args.out]
            if limit:
                cmd += ["--limit-bytes", str(limit)]
            yield name, cmd, dict(env0, PYTORCH_CUDA_ALLOC_CONF=conf)

    spawn_all(commands(), args.parallel)


def reap(running):
    time.sleep(0.2)
    left = []
    for name, p in running:
        if p.poll() is None:
            left.append((name, p))
        else:
            out = p.stdout.read()
            if p.returncode != 0:
                print("run %s failed (%d):\n%s" % (name, p.returncode, out[-2000:]), flush=True)
    return left


def verify(args):
    """Predicts every run from its workload's default run without a limit; prints the table."""
    rows, bad = [], 0
    with open(os.path.join(args.out, "limits.json")) as f:
        limits = json.load(f)
    for w in args.workloads:
        trace = os.path.join(args.out, run_name(w, "", None) + ".pickle")
        if not os.path.exists(trace):
            continue
        for limit in [None, limits[w]]:
            confs = [c for c in SETTINGS if limit or "garbage_collection" not in c]
            cmd = [args.memscope, "whatif", trace, "--json"]
            for c in confs:
                cmd += ["--alloc-conf", c]
            real = {}
            for c in confs:
                path = os.path.join(args.out, run_name(w, c, limit) + ".json")
                if not os.path.exists(path):
                    print("missing run %s" % run_name(w, c, limit))
                    bad += 1
                    continue
                with open(path) as f:
                    real[c] = json.load(f)
            confs = [c for c in confs if c in real]
            if "" not in real:
                continue
            if limit:
                cmd += ["--limit-bytes", str(real[""]["allowed_bytes"]), "--limit-kind", "fraction"]
            pred = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            check = pred["replay_check"]
            by_conf = {r["alloc_conf"]: r for r in pred["runs"]}
            for c in confs:
                p, r = by_conf[c], real[c]
                real_oom = r["oom"] is not None
                # Under a limit after an OOM the real peak is the peak before it; compare OOM only.
                exact = p["peak_reserved_bytes"] == r["peak_reserved_bytes"]
                off = abs(p["peak_reserved_bytes"] - r["peak_reserved_bytes"]) / max(1, r["peak_reserved_bytes"])
                ok = (p["oom"] == real_oom) and (real_oom or off <= 0.01)
                bad += not ok
                rows.append((w, c or "(defaults)", "%d MiB" % (limit // MIB) if limit else "-",
                             r["peak_reserved_bytes"], p["peak_reserved_bytes"], exact, real_oom, p["oom"],
                             "%d/%d" % (check["matched_segment_events"], check["recorded_segment_events"]), ok))
    print("%-13s %-55s %8s %15s %15s %6s %9s %9s %11s %s" % ("workload", "PYTORCH_CUDA_ALLOC_CONF", "limit",
          "real peak", "predicted", "exact", "real OOM", "pred OOM", "replay", "ok"))
    for row in rows:
        print("%-13s %-55s %8s %15d %15d %6s %9s %9s %11s %s" % row)
    # The replay check of every recorded run, under its own settings.
    for name in sorted(os.listdir(args.out)):
        if not name.endswith(".json") or name == "limits.json":
            continue
        with open(os.path.join(args.out, name)) as f:
            r = json.load(f)
        cmd = [args.memscope, "whatif", os.path.join(args.out, name[:-5] + ".pickle"), "--json", "--alloc-conf",
               r["alloc_conf"]]
        if r["limit_bytes"]:
            cmd += ["--limit-bytes", str(r["allowed_bytes"]), "--limit-kind", "fraction"]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            print("replay check %s: %s" % (name, out.stderr.strip()))
            bad += 1
            continue
        bad += check_peaks(args, name[:-5], r)
        c = json.loads(out.stdout)["replay_check"]
        exact = c["first_divergence"] is None and c["matched_segment_events"] == c["recorded_segment_events"]
        bad += not exact
        print("replay check %-60s %6d/%-6d segment events, peak %d vs %d %s" % (
            name[:-5], c["matched_segment_events"], c["recorded_segment_events"], c["replayed_peak_reserved_bytes"],
            c["recorded_peak_reserved_bytes"], "exact" if exact else "DIVERGES: %s" % c["first_divergence"]["why"]))
    print("%d predictions or checks off" % bad)
    return 1 if bad else 0


PEAKS = [("requested", "peak_requested_bytes"), ("allocated", "peak_allocated_bytes"),
         ("reserved", "peak_reserved_bytes")]


def check_peaks(args, stem, real):
    """`memscope analyze --json`'s three peaks of the run against its own `memory_stats()` (history
    was recorded from the first allocation, so they must be equal to the byte). Returns 1 if off."""
    out = subprocess.run([args.memscope, "analyze", "--json", os.path.join(args.out, stem + ".pickle")],
                         capture_output=True, text=True)
    if out.returncode != 0:
        print("peaks %s: %s" % (stem, out.stderr.strip()))
        return 1
    devices = json.loads(out.stdout)["devices"]
    d = devices.get("0") or next(iter(devices.values()))
    cells, off = [], False
    for what, key in PEAKS:
        ours, theirs = d.get(key), real.get(key)
        if theirs is None:
            continue
        off |= ours != theirs
        cells.append("%s %d vs %d%s" % (what, ours, theirs, "" if ours == theirs else " (%+d)" % (ours - theirs)))
    print("peaks %-60s %s, over %s %s" % (stem, ", ".join(cells), d.get("peaks_over"), "OFF" if off else "exact"))
    return 1 if off or d.get("peaks_over") != "whole_process" else 0


def main():
    ap = argparse.ArgumentParser(prog="python -m memscope_harness.whatif", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    one = sub.add_parser("run")
    one.add_argument("workload", choices=sorted(WORKLOADS))
    one.add_argument("--name", required=True)
    one.add_argument("--out", required=True)
    one.add_argument("--limit-bytes", type=int)
    ap.add_argument("--out", default="./memscope-whatif-out")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--memscope", default="memscope")
    ap.add_argument("--verify", action="store_true")
    ap.add_argument("--verify-only", action="store_true")
    args = ap.parse_args()
    if args.cmd == "run":
        return one_run(args)
    args.workloads = args.workloads.split(",")
    args.out = os.path.abspath(args.out)
    if not args.verify_only:
        run_all(args)
    if args.verify or args.verify_only:
        sys.exit(verify(args))


if __name__ == "__main__":
    main()
