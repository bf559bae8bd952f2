"""The planted memory behaviours. Each runs in its own process (``python -m
memscope_harness.scenarios NAME --out DIR``) with the agent attached, uploads its snapshot(s)
tagged ``scenario=NAME`` and writes ``DIR/NAME.truth.json``: what was planted (file, line, bytes,
expected verdicts) and the facts the verifier needs (pid, start time, timestamps).

Planted lines are marked ``# PLANT: <name>`` and found by scanning this file, so the truth
stays right when the code moves.
"""

import argparse
import ctypes
import json
import os
import socket
import sys
import time

import torch

import memscope_agent

import memscope_harness
MIB = 1 << 20
HERE = os.path.abspath(__file__)


def planted_line(name):
    return memscope_harness.planted_line(HERE, name)


def now_ms():
    return int(time.time() * 1000)


class Run:
    """What a scenario records: truth, facts, and the snapshot it uploads."""

    def __init__(self, name, out):
        self.name, self.out = name, out
        self.truth = {"scenario": name, "file": os.path.basename(HERE), "host": socket.gethostname(),
                      "pid": os.getpid(), "torch": torch.__version__,
                      "gpu": torch.cuda.get_device_name(0), "started_ms": now_ms()}
        self.agent = memscope_agent._agent

    def step(self, n):
        memscope_agent.step(n)

    def upload(self, kind="harness"):
        """Dumps and uploads the snapshot now; keeps a copy next to the truth (a fixture)."""
        path = os.path.join(self.out, "%s%s.pickle" % (self.name, self.suffix()))
        torch.cuda.memory._dump_snapshot(path)
        sid = self.agent.upload(path, "harness %s%s" % (self.name, self.suffix()), {"kind": kind})
        self.truth.setdefault("snapshots", []).append({"id": sid, "kind": kind, "file": os.path.basename(path)})
        return sid

    def suffix(self):
        r = os.environ.get("RANK")
        return ".rank%s" % r if r is not None and self.name == "ranks" else ""

    def finish(self, **truth):
        memscope_agent.stop()  # waits for OOM uploads, sends the last samples
        self.truth.update(truth)
        # OOM snapshots the agent dumped (kept next to the truth: MEMSCOPE_KEEP_SNAPSHOTS=1).
        for f in sorted(os.listdir(self.out)):
            if f.startswith("memscope-oom-") and "-%d-" % os.getpid() in f:
                name = "%s%s.oom.pickle" % (self.name, self.suffix())
                # A later incident's dump holds the earlier ones too: the last one is kept.
                os.replace(os.path.join(self.out, f), os.path.join(self.out, name))
                entry = {"id": None, "kind": "oom", "file": name}
                if entry not in self.truth.setdefault("snapshots", []):
                    self.truth["snapshots"].append(entry)
        self.truth["finished_ms"] = now_ms()
        self.truth["start_time_ms"] = self.agent.start_ms
        with open(os.path.join(self.out, "%s%s.truth.json" % (self.name, self.suffix())), "w") as f:
            json.dump(self.truth, f, indent=1)


class Mlp(torch.nn.Module):
    def __init__(self, width=2048, depth=4):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))  # PLANT: forward
        return x


def train_steps(run, steps, keep=None, graph_leak=False, sleep_s=0.05):
    """A small training loop; `keep` collects what a leaking job holds on to."""
    model = Mlp().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    total = torch.zeros((), device="cuda")
    allocated = []
    for i in range(steps):
        run.step(i)
        x = torch.randn(256, 2048, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if keep is not None:
            keep.append(torch.empty(4 * MIB, dtype=torch.uint8, device="cuda"))  # PLANT: leak_list
        if graph_leak:
            # An evaluation pass outside no_grad whose loss is summed for logging: the sum keeps
            # every pass's graph, and with it the activations the forward saved.
            total = total + model(torch.randn(256, 2048, device="cuda")).square().mean()  # PLANT: graph_leak
        torch.cuda.synchronize()
        allocated.append(torch.cuda.memory_allocated())
        time.sleep(sleep_s)
    return allocated, total


def steady(run):
    allocated, _ = train_steps(run, 60)
    run.upload()
    run.finish(expect={"leak": False}, allocated_first_last=[allocated[10], allocated[-1]])


def leak_list(run):
    kept = []
    train_steps(run, 60, keep=kept)
    run.upload()
    run.finish(expect={"leak": True, "line": planted_line("leak_list"), "bytes": 60 * 4 * MIB,
                       "bytes_per_step": 4 * MIB})


def leak_graph(run):
    # `total` holds every evaluation graph: keep it (as the job would) until the snapshot is taken
    # and the agent has sent its last samples.
    allocated, total = train_steps(run, 60, graph_leak=True)
    # Ground truth from the allocator itself: what each step leaves behind.
    per_step = (allocated[-1] - allocated[10]) / (len(allocated) - 11)
    run.upload()
    run.finish(expect={"leak": True, "cause_line": planted_line("graph_leak"),
                       "allocating_line": planted_line("forward"), "bytes_per_step": per_step})
    del total


def fill_and_punch(block_mib, limit_bytes):
    """Fills memory with `block_mib` tensors until less than a segment (20 MiB) is left under
    `limit_bytes`, then frees two of every three, so each 20 MiB segment keeps one: plenty of
    cached free memory, none of it contiguous, and no segment entirely free (the allocator would
    release it to make room)."""
    blocks = []
    while torch.cuda.memory_reserved() + 20 * MIB <= limit_bytes:
        blocks.append(torch.empty(block_mib * MIB, dtype=torch.uint8, device="cuda"))  # PLANT: fragment
    whole = len(blocks) // 3 * 3
    kept = [b for i, b in enumerate(blocks) if i % 3 == 1 or i >= whole]
    del blocks
    return kept


def largest_free_block():
    """The allocator's own answer, for the truth file."""
    return max((b["size"] for seg in torch.cuda.memory_snapshot() for b in seg["blocks"]
                if b["state"] == "inactive"), default=0)


def fragmentation(run):
    kept = fill_and_punch(6, 2 << 30)
    torch.cuda.synchronize()
    reserved, allocated = torch.cuda.memory_reserved(), torch.cuda.memory_allocated()
    largest = largest_free_block()
    run.upload()
    run.finish(expect={"line": planted_line("fragment"), "reserved_bytes": reserved, "allocated_bytes": allocated,
                       "free_in_segments_bytes": reserved - allocated, "largest_free_bytes": largest},
               kept=len(kept))


def oom_fragmentation(run):
    total = torch.cuda.get_device_properties(0).total_memory
    limit = 2 << 30
    torch.cuda.set_per_process_memory_fraction(limit / total)
    kept = fill_and_punch(6, limit)
    reserved, allocated = torch.cuda.memory_reserved(), torch.cuda.memory_allocated()
    oom = False
    try:
        big = torch.empty(24 * MIB, dtype=torch.uint8, device="cuda")  # PLANT: oom_request
        del big
    except torch.OutOfMemoryError:
        oom = True
    torch.cuda.set_per_process_memory_fraction(1.0)
    run.finish(expect={"oom": True, "verdict": "fragmentation", "requested_bytes": 24 * MIB,
                       "line": planted_line("oom_request")},
               raised=oom, reserved_bytes=reserved, allocated_bytes=allocated, kept=len(kept))


def expandable_segments(run):
    # The fragmentation scenario's pattern with expandable segments (set in the environment
    # before CUDA starts): instead of one 20 MiB segment per three blocks, the large pool is one
    # segment that grows by mapping pages.
    assert "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    kept = fill_and_punch(6, 2 << 30)  # PLANT: expandable
    torch.cuda.synchronize()
    segments = len(torch.cuda.memory_snapshot())
    reserved = torch.cuda.memory_reserved()
    run.upload()
    run.finish(expect={"expandable": True, "segments": segments, "reserved_bytes": reserved,
                       "line": planted_line("expandable")}, kept=len(kept))


def side_stream(run):
    side = torch.cuda.Stream()
    x = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")  # PLANT: record_stream
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000_000)  # keep the side stream busy for about a second
        x.add_(1)
    x.record_stream(side)
    del x  # freed, but its block waits for the side stream: pending
    run.upload()
    torch.cuda.synchronize()
    run.finish(expect={"pending_free_bytes": 64 * MIB, "line": planted_line("record_stream")})


def outside_pytorch(run):
    torch.empty(1, device="cuda")  # CUDA context and the allocator are up
    cuda = ctypes.CDLL("libcuda.so.1")
    size = 1 << 30
    time.sleep(3)  # a few readings before
    before_ms = now_ms()
    time.sleep(0.5)
    ptr = ctypes.c_uint64()
    rc = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size))  # PLANT: cuda_malloc
    after_ms = now_ms()
    time.sleep(3)  # a few readings after
    run.step(1)
    run.upload()
    total = torch.cuda.get_device_properties(0).total_memory
    # Two OOMs, as a job that probes its batch size and later dies meets them: a probe larger than
    # the whole device (caught), then, with most of the device taken outside PyTorch (another
    # library's cudaMalloc), the request that kills the job. The agent dumps at each incident; the
    # second dump holds both, and its report must lead with the last.
    probe = False
    try:
        torch.empty(2 * total, dtype=torch.uint8, device="cuda")  # PLANT: probe_oom
    except torch.OutOfMemoryError:
        probe = True
    time.sleep(run.agent.INCIDENT_GAP_S + 1)  # the next OOM is a new incident for the agent
    free, _ = torch.cuda.mem_get_info()
    hog = ctypes.c_uint64()
    hog_size = max(0, free - (3 << 30))
    hog_rc = cuda.cuMemAlloc_v2(ctypes.byref(hog), ctypes.c_size_t(hog_size))
    kept, raised = [], False
    try:
        for _ in range(64):
            kept.append(torch.empty(256 * MIB, dtype=torch.uint8, device="cuda"))  # PLANT: outside_oom
    except torch.OutOfMemoryError:
        raised = True
    reserved = torch.cuda.memory_reserved()
    del kept
    torch.cuda.empty_cache()
    cuda.cuMemFree_v2(hog)
    cuda.cuMemFree_v2(ptr)
    run.finish(expect={"outside_pytorch_growth_bytes": size, "line": planted_line("cuda_malloc"),
                       "oom_verdict": "outside_pytorch", "oom_line": planted_line("outside_oom"),
                       "outside_min_bytes": hog_size + size, "probe_verdict": "exhaustion",
                       "probe_line": planted_line("probe_oom")},
               cu_mem_alloc_rc=rc, before_ms=before_ms, after_ms=after_ms, device_total_bytes=total,
               hog_rc=hog_rc, hog_bytes=hog_size, probe_raised=probe, raised=raised,
               reserved_at_oom_bytes=reserved)


def cuda_graph(run):
    static_in = torch.randn(1024, 4096, device="cuda")
    layer = torch.nn.Linear(4096, 4096).cuda()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            layer(static_in)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = layer(static_in)  # PLANT: graph_capture
    g.replay()
    torch.cuda.synchronize()
    out_bytes = static_out.numel() * static_out.element_size()
    run.upload()
    run.finish(expect={"private_pool_min_bytes": out_bytes, "line": planted_line("graph_capture")})


def ranks(run):
    """One rank of a two-rank job whose ranks differ by a known amount, and where one rank runs out
    of memory. Every rank holds the same weights and runs the same steps (each a
    `ProfilerStep#N` scope, as the profiler's schedule writes them: the marks a run page aligns
    ranks by when clocks differ); rank 1 also holds `RANK_EXTRA` more at one line (a pipeline
    stage with more layers), and at its step 3 asks for more than its share (4 GiB) and fails.
    Rank 0 finishes and dumps its snapshot; rank 1's snapshot is the one the agent dumped at the
    OOM, as a job that dies leaves it."""
    rank = int(os.environ.get("RANK", "0"))
    device = torch.cuda.current_device()
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(RANK_LIMIT / total, device)
    weights = torch.empty(512 * MIB, dtype=torch.uint8, device="cuda")  # PLANT: rank_weights
    extra = None
    if rank == 1:
        extra = torch.empty(RANK_EXTRA, dtype=torch.uint8, device="cuda")  # PLANT: rank_imbalance
    raised, oom_step = False, None
    for step in range(6):
        with torch.profiler.record_function("ProfilerStep#%d" % step):
            run.step(step)
            acts = [torch.empty(64 * MIB, dtype=torch.uint8, device="cuda") for _ in range(4)]  # PLANT: rank_activations
            if rank == 1 and step == 3:
                try:
                    torch.empty(2 << 30, dtype=torch.uint8, device="cuda")  # PLANT: rank_oom
                except torch.OutOfMemoryError:
                    raised, oom_step = True, step
            del acts
        torch.cuda.synchronize()
        time.sleep(0.3)
        if raised:
            break  # the job dies here: no snapshot but the agent's
    peak = torch.cuda.max_memory_allocated()
    if rank != 1:
        run.upload()
    del weights, extra
    torch.cuda.set_per_process_memory_fraction(1.0, device)
    run.finish(expect={"rank": rank, "peak_bytes": peak, "oom": rank == 1, "limit_bytes": RANK_LIMIT,
                       "extra_bytes": RANK_EXTRA if rank == 1 else 0,
                       "imbalance_line": planted_line("rank_imbalance"), "oom_line": planted_line("rank_oom"),
                       "job": os.environ.get("MEMSCOPE_JOB")},
               device=device, raised=raised, oom_step=oom_step,
               device_total_bytes=total)


RANK_LIMIT = 4 << 30
RANK_EXTRA = 2 << 30


SCENARIOS = {
    "steady": steady,
    "leak_list": leak_list,
    "leak_graph": leak_graph,
    "fragmentation": fragmentation,
    "oom_fragmentation": oom_fragmentation,
    "expandable_segments": expandable_segments,
    "side_stream": side_stream,
    "outside_pytorch": outside_pytorch,
    "cuda_graph": cuda_graph,
    "ranks": ranks,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name", choices=sorted(SCENARIOS))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.name == "ranks":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0"))))
    else:
        torch.cuda.set_device(0)
    memscope_agent.start(record_history=True, max_entries=200_000)
    if memscope_agent._agent is None:
        sys.exit("memscope_agent did not start (see the log above)")
    SCENARIOS[args.name](Run(args.name, args.out))


if __name__ == "__main__":
    main()
