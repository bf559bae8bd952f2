"""The verdicts proof: ``python -m memscope_harness.verdicts --out DIR [--verify --memscope BIN]``

Real training programs that meet out-of-memory errors, each in a fresh process under a
per-process memory limit, under several allocator settings. Each run writes ``NAME.json``, the
ground truth read in the same process: how many OOMs the allocator logged (``num_ooms``), how many
Python caught, whether the last one ended the program, the step it died in, the planted lines and
the leak pattern; and ``NAME.pickle``, its memory snapshot (dumped in the top-level handler when
the program dies, as a job's ``except: _dump_snapshot(); raise`` does).

``--verify`` then reads every snapshot with ``memscope analyze --json`` and checks each OOM's
``recovered`` flag and the evidence, the fatal OOM's verdict and line, the step it names, every
leak suspect (the planted line and its pattern in words; no other suspect), and asks
``memscope whatif`` to predict, from each workload's trace under PyTorch's defaults, whether the
run dies under every other setting: predicted against what really happened. Exit status 1 when any
check is off.

One run: ``python -m memscope_harness.verdicts run WORKLOAD --conf CONF --out DIR [--limit-bytes N]``.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import memscope_harness
from memscope_harness import load
from memscope_harness.whatif import harness_env, spawn_all
MIB = 1 << 20
GIB = 1 << 30
HERE = os.path.abspath(__file__)

SETTINGS = ["", "expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4",
            "garbage_collection_threshold:0.8,max_split_size_mb:128"]


def planted_line(name):
    return memscope_harness.planted_line(HERE, name)


class Truth:
    """What a workload tells the verifier: the step it is in, what it caught, what it planted."""

    def __init__(self):
        self.step = None
        self.caught = 0
        self.expect = {}


def mlp(torch, width=4096, depth=8):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).cuda()


def train_step(torch, model, opt, x):
    loss = model(x).square().mean()  # PLANT: forward
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


# ---- workloads ------------------------------------------------------------------------------

def conv_workspace(torch, t):
    """A conv net with cuDNN benchmarking at three resolutions: cuDNN tries algorithms whose
    workspace does not fit under the limit, PyTorch catches each OOM inside the convolution and
    falls back to an algorithm that needs less. The program never sees an exception."""
    torch.backends.cudnn.benchmark = True
    nn = torch.nn
    net = nn.Sequential(
        nn.Conv2d(3, 64, 7, stride=2, padding=3), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(),
        nn.Conv2d(128, 256, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(),
        nn.Conv2d(256, 512, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 100)).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    for i in range(12):
        t.step = i
        side = [224, 192, 256][i % 3]
        with torch.profiler.record_function("ProfilerStep#%d" % i):
            x = torch.randn(32, 3, side, side, device="cuda")
            y = torch.randint(0, 100, (32,), device="cuda")
            loss = torch.nn.functional.cross_entropy(net(x), y)  # PLANT: conv_forward
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    t.expect = {"fatal": False, "line": planted_line("conv_forward")}


def find_batch(torch, t, model, opt, start):
    """accelerate's find_executable_batch_size: try a step, on OOM free what can be freed and try
    nine tenths of the batch."""
    import gc
    batch = start
    while True:
        try:
            train_step(torch, model, opt, torch.randn(batch, 4096, device="cuda"))  # PLANT: probe
            return batch
        except torch.OutOfMemoryError:
            t.caught += 1
            opt.zero_grad(set_to_none=True)
            gc.collect()
            torch.cuda.empty_cache()
            batch = int(batch * 0.9)


def batch_search(torch, t):
    """A batch-size search that catches its OOMs, then trains at the batch it found."""
    model = mlp(torch)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    t.step = 0
    batch = find_batch(torch, t, model, opt, 65536)
    for i in range(10):
        t.step = i
        with torch.profiler.record_function("ProfilerStep#%d" % i):
            train_step(torch, model, opt, torch.randn(batch, 4096, device="cuda"))
    t.expect = {"fatal": False, "batch": batch, "line": planted_line("forward")}


def search_then_die(torch, t):
    """The search above, then training whose batches grow at step 6 (longer sequences packed in):
    the caught OOMs come first, the fatal one last."""
    model = mlp(torch)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    t.step = 0
    batch = find_batch(torch, t, model, opt, 32768)
    t.expect = {"fatal": True, "batch": batch, "line": planted_line("forward"), "fatal_step": 6}
    for i in range(10):
        t.step = i
        rows = batch if i < 6 else batch * 3
        with torch.profiler.record_function("ProfilerStep#%d" % i):
            train_step(torch, model, opt, torch.randn(rows, 4096, device="cuda"))


KEEP = []


def leak_oom(torch, t):
    """A training loop that keeps 256 MiB every step from step 5 (a metric history kept on the
    GPU) until the limit stops it."""
    model = mlp(torch, 2048, 4)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    t.expect = {"fatal": True, "verdict": "growth", "leak_line": planted_line("leak_every_step"),
                "leak_bytes": 256 * MIB, "leak_every": 1, "leak_since_step": 5,
                "pattern": "256.0 MiB every step since step 5"}
    for i in range(200):
        t.step = i
        with torch.profiler.record_function("ProfilerStep#%d" % i):
            train_step(torch, model, opt, torch.randn(1024, 2048, device="cuda"))
            if i >= 5:
                KEEP.append(torch.empty(256 * MIB, dtype=torch.uint8, device="cuda"))  # PLANT: leak_every_step


def periodic_leak(torch, t):
    """A training loop that keeps 32 MiB every 5th step (an evaluation's outputs appended to a
    list), 50 steps: ten stairs, no OOM."""
    model = mlp(torch, 2048, 4)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    kept = []
    for i in range(50):
        t.step = i
        with torch.profiler.record_function("ProfilerStep#%d" % i):
            train_step(torch, model, opt, torch.randn(1024, 2048, device="cuda"))
            if i % 5 == 4:
                kept.append(torch.empty(32 * MIB, dtype=torch.uint8, device="cuda"))  # PLANT: leak_every_5th
    t.expect = {"fatal": False, "leak_line": planted_line("leak_every_5th"), "leak_bytes": 32 * MIB,
                "leak_every": 5, "leak_times": 10, "pattern": "32.0 MiB every 5th step (10 times)"}
    return kept


def fragmentation_oom(torch, t):
    """304 blocks of 6 MiB (102 segments of 20 MiB by default, just under the 2 GiB limit), two of
    every three freed but the last (no segment wholly free), then a 24 MiB request: plenty cached, no hole fits.
    A fixed program (the fill does not adapt to the allocator), so every setting replays the same
    requests. Nothing grows step over step: no leak."""
    blocks = [torch.empty(6 * MIB, dtype=torch.uint8, device="cuda") for _ in range(304)]  # PLANT: fill
    # The 304th block sits alone in the last segment: kept, or that segment would be wholly free
    # and released to make room.
    KEEP.extend(b for i, b in enumerate(blocks) if i % 3 == 1 or i == 303)
    del blocks
    t.expect = {"fatal": True, "verdict": "fragmentation", "line": planted_line("big_request")}
    KEEP.append(torch.empty(24 * MIB, dtype=torch.uint8, device="cuda"))  # PLANT: big_request


# ---- held out: written after the rules, to see them hold on programs they were not tuned on -----

HISTORY = []


def gpt_loss_history(torch, t):
    """A small transformer trained with AdamW (no step annotations of the profiler's kind), which
    keeps every 3rd step's loss tensor, graph and all, for a running average it never reads."""
    layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 3).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for i in range(30):
        t.step = i
        x = torch.randn(16, 128, 256, device="cuda")
        # The activations kept are made here (what memscope can point at); the line below keeps them.
        loss = model(x).square().mean()  # PLANT: keep_loss
        if i % 3 == 2:
            HISTORY.append(loss)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    t.expect = {"fatal": False, "leak_line": planted_line("keep_loss"), "pattern": "every 3rd step (10 times)"}


def lstm_search(torch, t):
    """An LSTM language model: a batch-size search by halving that catches its OOMs, then ten
    profiled steps at the batch found."""
    import gc
    emb, lstm, head = torch.nn.Embedding(8000, 512).cuda(), torch.nn.LSTM(512, 1024, 2, batch_first=True).cuda(), \
        torch.nn.Linear(1024, 8000).cuda()
    params = list(emb.parameters()) + list(lstm.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=1e-3)

    def step(batch):
        x = torch.randint(0, 8000, (batch, 256), device="cuda")
        out, _ = lstm(emb(x))
        loss = torch.nn.functional.cross_entropy(head(out).flatten(0, 1), x.flatten())  # PLANT: lstm_loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    batch = 1024
    while True:
        try:
            step(batch)
            break
        except torch.OutOfMemoryError:
            t.caught += 1
            opt.zero_grad(set_to_none=True)
            gc.collect()
            torch.cuda.empty_cache()
            batch //= 2
    for i in range(10):
        t.step = i
        with torch.profiler.record_function("ProfilerStep#%d" % i):
            step(batch)
    t.expect = {"fatal": False, "batch": batch}


def kv_growth_oom(torch, t):
    """Token-by-token generation that appends every token's keys and values to a cache with no
    bound, until the limit stops it: growth, fatal, no optimizer and no annotations."""
    w = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    keys, values = [], []
    t.expect = {"fatal": True, "verdict": "growth", "leak_line": planted_line("kv_append"),
                "pattern": "every step since step 1"}
    for i in range(100000):
        h = torch.randn(64, 2048, device="cuda", dtype=torch.float16) @ w
        k, v = (h @ w).float(), (h @ w).float()  # PLANT: kv_append
        keys.append(k)
        values.append(v)
        torch.softmax(h.float() @ k.T, dim=-1)


def rank_growth(torch, t):
    """One rank of a two-rank job (RANK=0 or 1; both may share one GPU): the same training steps,
    but rank 1 keeps 256 MiB every step from step 3 (a metric history on the GPU) until its limit
    stops it; rank 0 trains to the end. The run page must name rank 1 and the growing line."""
    rank = int(os.environ.get("RANK", "0"))
    model = mlp(torch, 2048, 4)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    t.expect = {"fatal": rank == 1, "rank": rank}
    if rank == 1:
        t.expect.update({"verdict": "growth", "leak_line": planted_line("rank_leak"),
                         "pattern": "256.0 MiB every step since step 3"})
    for i in range(30):
        t.step = i
        with torch.profiler.record_function("ProfilerStep#%d" % i):
            train_step(torch, model, opt, torch.randn(1024, 2048, device="cuda"))
            if rank == 1 and i >= 3:
                KEEP.append(torch.empty(256 * MIB, dtype=torch.uint8, device="cuda"))  # PLANT: rank_leak


WORKLOADS = {"conv_workspace": conv_workspace, "batch_search": batch_search, "search_then_die": search_then_die,
             "leak_oom": leak_oom, "periodic_leak": periodic_leak, "fragmentation_oom": fragmentation_oom,
             "gpt_loss_history": gpt_loss_history, "lstm_search": lstm_search, "kv_growth_oom": kv_growth_oom,
             "rank_growth": rank_growth}
FIXED_LIMITS = {"batch_search": 4 * GIB, "search_then_die": 4 * GIB, "leak_oom": 4 * GIB,
                "periodic_leak": None, "fragmentation_oom": 2 * GIB, "gpt_loss_history": None,
                "lstm_search": 6 * GIB, "kv_growth_oom": 3 * GIB, "rank_growth": 4 * GIB}
# conv_workspace: the limit is found by `sweep` (fractions of its peak without one).
SWEEP = [0.8, 0.6, 0.45, 0.35, 0.25, 0.18, 0.12]


def one_run(args):
    import torch
    torch.cuda.init()
    total = torch.cuda.mem_get_info()[1]
    if args.limit_bytes:
        torch.cuda.set_per_process_memory_fraction(args.limit_bytes / total)
    torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks=args.stacks)
    t = Truth()
    raised = None
    keep = None
    try:
        keep = WORKLOADS[args.workload](torch, t)
    except torch.OutOfMemoryError as e:
        raised = {"step": t.step, "message": str(e).split("\n")[0][:400]}
    base = os.path.join(args.out, args.name)
    torch.cuda.memory._dump_snapshot(base + ".pickle")
    torch.cuda.memory._record_memory_history(enabled=None)
    torch.cuda.synchronize()
    st = torch.cuda.memory_stats()
    with open(base + ".json", "w") as f:
        json.dump({"workload": args.workload, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                   "limit_bytes": args.limit_bytes,
                   "allowed_bytes": int(args.limit_bytes / total * total) if args.limit_bytes else None,
                   "device_total_bytes": total, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
                   "stacks": args.stacks, "file": os.path.basename(HERE),
                   "num_ooms": st.get("num_ooms", 0), "caught": t.caught, "raised": raised,
                   "peak_reserved_bytes": st.get("reserved_bytes.all.peak", 0),
                   "peak_allocated_bytes": st.get("allocated_bytes.all.peak", 0),
                   "alloc_retries": st.get("num_alloc_retries", 0), "expect": t.expect}, f, indent=1)
    del keep
    KEEP.clear()


def run_name(workload, conf, tag=""):
    c = conf.replace(":", "_").replace(",", "+") or "default"
    return "%s%s.%s" % (workload, tag, c)


def run_jobs(args, jobs):
    """Runs (name, workload, conf, limit, stacks) jobs, `args.parallel` at a time."""
    env0 = harness_env()

    def commands():
        for name, w, conf, limit, stacks in jobs:
            cmd = [sys.executable, "-m", "memscope_harness.verdicts", "run", w, "--name", name, "--out", args.out,
                   "--stacks", stacks]
            if limit:
                cmd += ["--limit-bytes", str(limit)]
            yield name, cmd, dict(env0, PYTORCH_CUDA_ALLOC_CONF=conf)

    spawn_all(commands(), args.parallel)


def stacks_of(w):
    # The conv net's stacks carry C++ frames (the cuDNN fallback shows in them); the rest Python only.
    return "all" if w == "conv_workspace" else "python"


def record(args):
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    ws = [w for w in args.workloads if w != "conv_workspace"]
    limits = {w: FIXED_LIMITS[w] for w in ws}
    if "conv_workspace" in args.workloads:
        run_jobs(args, [("conv_workspace.free", "conv_workspace", "", None, "python")])
        peak = load(args.out, "conv_workspace.free")["peak_reserved_bytes"]
        sweep = [("conv_workspace.sweep%d" % i, "conv_workspace", "", int(peak * f), "python")
                 for i, f in enumerate(SWEEP)]
        run_jobs(args, sweep)
        found = [load(args.out, n) for n, *_ in sweep]
        print("conv_workspace sweep (peak without a limit %d MiB): %s" % (peak // MIB, ", ".join(
            "%d MiB: %s OOMs%s" % (r["limit_bytes"] // MIB, r["num_ooms"], " RAISED" if r["raised"] else "")
            for r in found if r)), flush=True)
        survived = [r for r in found if r and r["num_ooms"] > 0 and not r["raised"]]
        died = [r for r in found if r and r["num_ooms"] > 1 and r["raised"]]
        if survived:
            limits["conv_workspace"] = survived[-1]["limit_bytes"]
            ws.append("conv_workspace")
        if died:
            limits["conv_workspace_dies"] = died[0]["limit_bytes"]
    jobs = [(run_name(w, c), w, c, limits[w], stacks_of(w)) for w in ws for c in SETTINGS]
    if "conv_workspace_dies" in limits:
        jobs.append((run_name("conv_workspace", "", ".dies"), "conv_workspace", "", limits["conv_workspace_dies"],
                     "python"))
    run_jobs(args, jobs)
    with open(os.path.join(args.out, "limits.json"), "w") as f:
        json.dump(limits, f, indent=1)
    print("%d runs in %.0f s" % (len(jobs), time.time() - t0), flush=True)


# ---- verify ---------------------------------------------------------------------------------

def analyze(args, stem):
    out = subprocess.run([args.memscope, "analyze", "--json", os.path.join(args.out, stem + ".pickle")],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    return json.loads(out.stdout)


def line_of(frame):
    return frame and frame.get("line")


def check_run(args, stem, r):
    """Every check of one run's report against its truth; returns the lines that are off."""
    rep = analyze(args, stem)
    e, off = r["expect"], []
    ooms = sorted(rep.get("ooms", []), key=lambda o: o["position"])
    fatal = 1 if r["raised"] else 0
    if len(ooms) != r["num_ooms"]:
        off.append("%d OOMs in the report, the allocator logged %d" % (len(ooms), r["num_ooms"]))
    rec = [o for o in ooms if o["recovered"]]
    if len(rec) != r["num_ooms"] - fatal:
        off.append("%d OOMs marked recovered, %d were survived" % (len(rec), r["num_ooms"] - fatal))
    if fatal and ooms and ooms[-1]["recovered"]:
        off.append("the last OOM raised but is marked recovered")
    internal = r["num_ooms"] - r["caught"] - fatal
    fallbacks = [o for o in ooms if o.get("recovery") == "workspace_fallback"]
    if len(fallbacks) != internal:
        off.append("%d OOMs named workspace fallbacks, PyTorch caught %d inside operators" % (len(fallbacks), internal))
    if fatal and ooms:
        last = ooms[-1]
        if e.get("verdict") and last["verdict"] != e["verdict"]:
            off.append("fatal OOM verdict %s, want %s" % (last["verdict"], e["verdict"]))
        line = e.get("leak_line") if e.get("verdict") == "growth" else e.get("line")
        if e.get("verdict") == "growth":
            named = last.get("growth") and line_of(last["growth"].get("site"))
        else:
            named = line_of(last.get("site"))
        if line and named != line:
            off.append("fatal OOM names line %s, want %s" % (named, line))
        if last.get("step") != r["raised"]["step"]:
            off.append("fatal OOM at step %s, it died in step %s" % (last.get("step"), r["raised"]["step"]))
    sus = rep.get("leak_suspects", [])
    if e.get("leak_line"):
        mine = [s for s in sus if line_of(s.get("site")) == e["leak_line"]]
        if not mine:
            off.append("no leak suspect at line %d" % e["leak_line"])
        elif e.get("pattern") and e["pattern"] not in mine[0]["growth"]:
            off.append("leak pattern %r, want %r" % (mine[0]["growth"], e["pattern"]))
    false = [s for s in sus if line_of(s.get("site")) != e.get("leak_line")]
    if false:
        off.append("%d false leak suspects: %s" % (len(false), "; ".join(
            "%s:%s %s" % (s["site"] and s["site"].get("filename"), line_of(s.get("site")), s["growth"])
            for s in false[:3])))
    return rep, off


def verify(args):
    bad = 0
    names = sorted(n[:-5] for n in os.listdir(args.out) if n.endswith(".json") and n != "limits.json")
    print("%-58s %5s %6s %7s %6s  %s" % ("run", "OOMs", "caught", "fatal", "leaks", "checks"))
    for stem in names:
        r = load(args.out, stem)
        if not os.path.exists(os.path.join(args.out, stem + ".pickle")):
            continue
        try:
            rep, off = check_run(args, stem, r)
        except RuntimeError as err:
            rep, off = {}, ["analyze failed: %s" % err]
        bad += bool(off)
        print("%-58s %5d %6d %7s %6d  %s" % (stem, r["num_ooms"], r["caught"], "yes" if r["raised"] else "no",
                                            len(rep.get("leak_suspects", [])), "ok" if not off else "OFF: " + "; ".join(off)))
    bad += predictions(args)
    print("%d runs or predictions off" % bad)
    return 1 if bad else 0


def predictions(args):
    """`memscope whatif` from each workload's default-settings trace, under its limit, against
    the real runs under every setting: does the run die?"""
    bad = 0
    print("\n%-18s %-55s %9s %11s %11s %s" % ("workload", "PYTORCH_CUDA_ALLOC_CONF", "limit", "real", "predicted",
                                             "ok"))
    for w in WORKLOADS:
        base = load(args.out, run_name(w, ""))
        if not base:
            continue
        cmd = [args.memscope, "whatif", os.path.join(args.out, run_name(w, "") + ".pickle"), "--json"]
        for c in SETTINGS:
            cmd += ["--alloc-conf", c]
        if base["allowed_bytes"]:
            cmd += ["--limit-bytes", str(base["allowed_bytes"]), "--limit-kind", "fraction"]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            print("%-18s whatif failed: %s" % (w, out.stderr.strip()))
            bad += 1
            continue
        answer = json.loads(out.stdout)
        pred = {p["alloc_conf"]: p for p in answer["runs"]}
        # Growth ended the trace: a setting that gets past that OOM only moves where it fails.
        growth = answer.get("growth_ends_trace", False)
        for c in SETTINGS:
            real = load(args.out, run_name(w, c))
            if not real:
                continue
            p = pred.get(c)
            real_words = "dies" if real["raised"] else "survives %d" % real["num_ooms"]
            dies = p is not None and (p["oom"] or growth)
            pred_words = ("dies" if dies else "survives %d" % p["survivable_ooms"]) if p else "-"
            ok = p is not None and dies == bool(real["raised"])
            bad += not ok
            print("%-18s %-55s %9s %11s %11s %s" % (w, c or "(defaults)", "%d MiB" % (base["limit_bytes"] // MIB)
                                                   if base["limit_bytes"] else "-", real_words, pred_words,
                                                   "ok" if ok else "OFF"))
    return bad


def main():
    ap = argparse.ArgumentParser(prog="python -m memscope_harness.verdicts", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    one = sub.add_parser("run")
    one.add_argument("workload", choices=sorted(WORKLOADS))
    one.add_argument("--name", required=True)
    one.add_argument("--out", required=True)
    one.add_argument("--limit-bytes", type=int)
    one.add_argument("--stacks", default="python")
    ap.add_argument("--out", default="./memscope-verdicts-out")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--parallel", type=int, default=6)
    ap.add_argument("--memscope", default="memscope")
    ap.add_argument("--verify", action="store_true")
    ap.add_argument("--verify-only", action="store_true")
    args = ap.parse_args()
    if args.cmd == "run":
        return one_run(args)
    args.workloads = args.workloads.split(",")
    args.out = os.path.abspath(args.out)
    if not args.verify_only:
        record(args)
    if args.verify or args.verify_only:
        sys.exit(verify(args))


if __name__ == "__main__":
    main()
