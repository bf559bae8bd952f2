"""The will-it-fit sweep: ``python -m memscope_harness.predict --out DIR``

Each workload is trained for a few steps at several sizes (batch or sequence length), each in a
fresh process: at its small sizes with the memory history recorded (the snapshots `memscope
predict` learns from), at larger sizes for real (what it must predict: peak reserved and
allocated bytes from ``torch.cuda.memory_stats()``, and whether ``OutOfMemoryError`` was
raised), then every size again under a per-process memory fraction chosen between two of the
real peaks, so some sizes fit and some do not. Each run writes ``NAME.json``; the recorded ones
``NAME.pickle`` too.

Beside the sweep's own limit, PROBES run a workload under further limits at many sizes: where the
replay says a size runs out of memory below a larger size that fits (not monotonic), the GPU says
whether it really does. Each writes ``NAME.limitMIB.json``.

``--verify DIR [--bin memscope]``: `memscope predict` from each workload's recordings at every size
run for real, with and without each limit; prints predicted against real peak reserved, the linear
baseline, and OOM (and survived OOMs) predicted against real. Runs where the figures are (on the
GPU host after the sweep, or here on the recorded fixtures).

One run: ``python -m memscope_harness.predict run WORKLOAD --size N [--record] [--limit-bytes L] --out DIR``.
"""

import argparse
import json
import os
import subprocess
import sys
import time

from memscope_harness import load
from memscope_harness.categories import lstm_lm
from memscope_harness.whatif import harness_env, spawn_all

MIB = 1 << 20
STEPS = 4


# ---- workloads: `size` is the batch (or the sequence length); each returns its step count ------

def transformer_batch(torch, size, step):
    """A transformer encoder (PyTorch's layers, sequence 256) with AdamW, by batch size."""
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for i in range(STEPS):
        x = torch.randn(size, 256, 512, device="cuda")
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step(i)


def transformer_seq(torch, size, step):
    """The same transformer by sequence length (batch 8)."""
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for i in range(STEPS):
        x = torch.randn(8, size, 512, device="cuda")
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step(i)


def convnet_batch(torch, size, step):
    """A conv net with batch norm and SGD with momentum at 128×128, by batch size."""
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
        nn.Conv2d(128, 256, 3, stride=2, padding=1), nn.BatchNorm2d(256), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 100)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for i in range(STEPS):
        x = torch.randn(size, 3, 128, 128, device="cuda")
        y = torch.randint(0, 100, (size,), device="cuda")
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step(i)


def mlp_checkpoint_batch(torch, size, step):
    """A deep MLP with non-reentrant activation checkpointing and Adam, by batch size."""
    from torch.utils.checkpoint import checkpoint
    nn = torch.nn
    blocks = nn.ModuleList(nn.Sequential(nn.Linear(2048, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU())
                           for _ in range(6)).cuda()
    opt = torch.optim.Adam(blocks.parameters(), lr=1e-4)
    for i in range(STEPS):
        h = torch.randn(size, 2048, device="cuda")
        for b in blocks:
            h = checkpoint(b, h, use_reentrant=False)
        h.square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step(i)


def lstm_batch(torch, size, step):
    """A two-layer cuDNN LSTM language model with RMSprop (sequence 128), by batch size."""
    nn = torch.nn
    model = lstm_lm(torch).cuda()
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-4)
    for i in range(STEPS):
        x = torch.randint(0, 8192, (size, 128), device="cuda")
        nn.functional.cross_entropy(model(x).view(-1, 8192), x.view(-1)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step(i)


WORKLOADS = {"transformer_batch": transformer_batch, "transformer_seq": transformer_seq,
             "convnet_batch": convnet_batch, "mlp_checkpoint_batch": mlp_checkpoint_batch,
             "lstm_batch": lstm_batch}
# (sizes recorded, sizes run for real)
SIZES = {
    "transformer_batch": ([2, 4, 6], [8, 12, 16, 24, 32, 40, 48, 64]),
    "transformer_seq": ([128, 256, 384], [512, 640, 768, 1024, 1280, 1536, 2048]),
    "convnet_batch": ([8, 16, 24], [32, 48, 64, 96, 128, 160, 192, 256]),
    "mlp_checkpoint_batch": ([256, 512, 768], [1024, 1536, 2048, 3072, 4096, 6144, 8192]),
    "lstm_batch": ([4, 8, 12], [16, 24, 32, 48, 64, 96, 128]),
}
# Further limits (MiB) and the sizes run under each: chosen where the replay of the recordings
# predicts a size that runs out below one that fits.
PROBES = {
    "mlp_checkpoint_batch": ([1052, 1064], [1024, 1280, 1536, 1792, 2048, 2560, 3072]),
}


def one_run(args):
    import torch
    torch.cuda.init()
    total = torch.cuda.mem_get_info()[1]
    if args.limit_bytes:
        torch.cuda.set_per_process_memory_fraction(args.limit_bytes / total)
    if args.record:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    done = {"steps": 0}
    raised = None

    def step(i):
        done["steps"] = i + 1

    try:
        WORKLOADS[args.workload](torch, args.size, step)
    except torch.OutOfMemoryError as e:
        raised = {"step": done["steps"], "message": str(e).split("\n")[0][:300]}
    base = os.path.join(args.out, args.name)
    if args.record:
        torch.cuda.memory._dump_snapshot(base + ".pickle")
        torch.cuda.memory._record_memory_history(enabled=None)
    st = torch.cuda.memory_stats()
    with open(base + ".json", "w") as f:
        json.dump({"workload": args.workload, "size": args.size, "recorded": args.record,
                   "limit_bytes": args.limit_bytes, "device_total_bytes": total,
                   "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
                   "peak_reserved_bytes": st.get("reserved_bytes.all.peak", 0),
                   "peak_allocated_bytes": st.get("allocated_bytes.all.peak", 0),
                   "num_ooms": st.get("num_ooms", 0), "oom": raised is not None, "raised": raised,
                   "steps": done["steps"]}, f, indent=1)


def run_jobs(args, jobs):
    env = harness_env()

    def commands():
        for name, w, size, record, limit in jobs:
            cmd = [sys.executable, "-m", "memscope_harness.predict", "run", w, "--size", str(size), "--name",
                   name, "--out", args.out]
            if record:
                cmd.append("--record")
            if limit:
                cmd += ["--limit-bytes", str(limit)]
            yield name, cmd, env

    spawn_all(commands(), args.parallel)


def limit_between(peaks):
    """A fraction's bytes between two real peaks in the middle of the sweep: some sizes fit, some
    do not (the largest peaks' neighbours, so a size whose peak dips below a smaller size's is in play)."""
    ordered = sorted(peaks)
    k = len(ordered) // 2
    return (ordered[k - 1] + ordered[k]) // 2


def record_all(args):
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    jobs = []
    for w in args.workloads:
        small, large = SIZES[w]
        jobs += [("%s.%d.rec" % (w, s), w, s, True, None) for s in small]
        jobs += [("%s.%d" % (w, s), w, s, False, None) for s in small + large]
    run_jobs(args, jobs)
    limits = {}
    jobs = []
    for w in args.workloads:
        small, large = SIZES[w]
        peaks = [r["peak_reserved_bytes"] for r in (load(args.out, "%s.%d" % (w, s)) for s in large) if r]
        if len(peaks) < 2:
            continue
        limits[w] = limit_between(peaks)
        jobs += [("%s.%d.limit" % (w, s), w, s, False, limits[w]) for s in small + large]
    for w in args.workloads:
        mibs, sizes = PROBES.get(w, ([], []))
        jobs += [("%s.%d.limit%d" % (w, s, m), w, s, False, m * MIB) for m in mibs for s in sizes]
    run_jobs(args, jobs)
    with open(os.path.join(args.out, "limits.json"), "w") as f:
        json.dump(limits, f, indent=1)
    for w in args.workloads:
        small, large = SIZES[w]
        rows = []
        for s in small + large:
            r, lim = load(args.out, "%s.%d" % (w, s)), load(args.out, "%s.%d.limit" % (w, s))
            rows.append("%d: %s%s" % (s, "%.0fM" % (r["peak_reserved_bytes"] / MIB) if r else "?",
                                      " (limit: OOM)" if lim and lim["oom"] else ""))
        print("%s (limit %s MiB): %s" % (w, limits.get(w, 0) // MIB, ", ".join(rows)), flush=True)
    print("%d workloads in %.0f s" % (len(args.workloads), time.time() - t0), flush=True)


def probe(args):
    """The probes alone, self-contained: each probed workload's recordings, its real runs at the
    probe sizes without a limit and under each probe limit (on the GPU at hand), and any extra
    recordings asked (``--record-at W:S,...``, to compare a synthesized run with a real one)."""
    os.makedirs(args.out, exist_ok=True)
    jobs = []
    for w in args.workloads:
        if w not in PROBES:
            continue
        small, _ = SIZES[w]
        mibs, sizes = PROBES[w]
        jobs += [("%s.%d.rec" % (w, s), w, s, True, None) for s in small]
        jobs += [("%s.%d" % (w, s), w, s, False, None) for s in sorted(set(small + sizes))]
        jobs += [("%s.%d.limit%d" % (w, s, m), w, s, False, m * MIB) for m in mibs for s in sizes]
    for spec in filter(None, (args.record_at or "").split(",")):
        w, s = spec.split(":")
        jobs.append(("%s.%s.rec" % (w, s), w, int(s), True, None))
        jobs.append(("%s.%s" % (w, s), w, int(s), False, None))
    run_jobs(args, jobs)


def predicted(args, w, sizes, limit=None):
    """`memscope predict --json` from the workload's recordings: {size: answer}."""
    small, _ = SIZES[w]
    recs = [os.path.join(args.out, "%s.%d.rec.pickle" % (w, s)) for s in small]
    recs = [r if os.path.exists(r) else r + ".xz" for r in recs]
    cmd = [args.bin, "predict"] + ["%s=%d" % (r, s) for r, s in zip(recs, small)]
    for s in sizes:
        cmd += ["--size", str(s)]
    if limit:
        cmd += ["--limit-bytes", str(limit), "--limit-kind", "fraction"]
    out = subprocess.run(cmd + ["--json"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit("%s failed: %s" % (" ".join(cmd), out.stderr[-2000:]))
    return {a["size"]: a for a in json.loads(out.stdout)["sizes"]}


def verify(args):
    """The table: every size run for real, predicted from the recordings; the totals at the end."""
    limits = load(args.out, "limits") or {}
    within, peaks, right, calls = 0, 0, 0, 0
    print("%-22s %6s %10s %10s %7s %10s %7s | %-9s %-9s | %s" % (
        "workload", "size", "real MiB", "predicted", "error", "linear", "error", "limit MiB",
        "OOM real/predicted", "survived real/predicted"))
    for w in args.workloads:
        small, large = SIZES[w]
        probes = PROBES.get(w, ([], []))
        sizes = [s for s in sorted(set(small + large + probes[1])) if load(args.out, "%s.%d" % (w, s))]
        if not sizes:
            continue
        free = predicted(args, w, sizes)
        checks = [(limits.get(w), "limit", small + large)] if w in limits else []
        checks += [(m * MIB, "limit%d" % m, probes[1]) for m in probes[0]]
        for s in sizes:
            real, p = load(args.out, "%s.%d" % (w, s)), free[s]
            r, q, lin = real["peak_reserved_bytes"], p["peak_reserved_bytes"], p["linear_peak_reserved_bytes"]
            peaks += 1
            within += abs(q / r - 1) <= 0.05
            print("%-22s %6d %10.0f %10.0f %+6.1f%% %10.0f %+6.1f%%" % (
                w, s, r / MIB, q / MIB, 100 * (q / r - 1), lin / MIB, 100 * (lin / r - 1)))
        for limit, tag, at in checks:
            ran = [s for s in at if load(args.out, "%s.%d.%s" % (w, s, tag))]
            if not ran:
                continue
            under = predicted(args, w, ran, limit)
            for s in ran:
                real, p = load(args.out, "%s.%d.%s" % (w, s, tag)), under[s]
                survived = real["num_ooms"] - int(real["oom"])
                calls += 1
                right += real["oom"] == p["oom"]
                print("%-22s %6d %10.0f %10.0f %7s %10s %7s | %-9.0f %-5s %-5s %s | %d / %d" % (
                    w, s, real["peak_reserved_bytes"] / MIB, p["peak_reserved_bytes"] / MIB, "", "", "",
                    limit / MIB,
                    real["oom"], p["oom"], "" if real["oom"] == p["oom"] else "WRONG", survived,
                    p["survivable_ooms"]))
    print("peak reserved within 5%%: %d of %d; OOM calls right: %d of %d" % (within, peaks, right, calls))
    return 0 if right == calls else 1


def main():
    ap = argparse.ArgumentParser(prog="python -m memscope_harness.predict", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    one = sub.add_parser("run")
    one.add_argument("workload", choices=sorted(WORKLOADS))
    one.add_argument("--size", type=int, required=True)
    one.add_argument("--name", required=True)
    one.add_argument("--out", required=True)
    one.add_argument("--record", action="store_true")
    one.add_argument("--limit-bytes", type=int)
    ap.add_argument("--out", default="./memscope-predict-out")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--verify", action="store_true",
                    help="predict every size run under --out from its recordings and print the table")
    ap.add_argument("--bin", default="memscope", help="the memscope binary (with --verify)")
    ap.add_argument("--probe", action="store_true",
                    help="run only the PROBES (recordings, real runs, probe limits) into --out")
    ap.add_argument("--record-at", help="with --probe: also record W:S,... (one run each)")
    args = ap.parse_args()
    if args.cmd == "run":
        return one_run(args)
    args.workloads = args.workloads.split(",")
    args.out = os.path.abspath(args.out)
    if args.verify:
        sys.exit(verify(args))
    if args.probe:
        return probe(args)
    record_all(args)


if __name__ == "__main__":
    main()
