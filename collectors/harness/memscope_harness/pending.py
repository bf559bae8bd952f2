"""Frees stuck pending, planted on a GPU with their ground truth (issue 40).

``python -m memscope_harness.pending --out DIR [--workloads a,b]`` runs each workload in its own
process. A workload records the allocator's history, plants tensors that another stream keeps
busy (``Tensor.record_stream`` after ``torch.cuda._sleep`` on that stream), frees them, and
writes ``pending_<workload>.pickle`` beside ``pending_<workload>.truth.json``: each planted
tensor's address and size (``data_ptr``, ``untyped_storage().nbytes()``), the stream that held
it, how long that stream was kept busy (CUDA events around the sleep) and whether it was still
busy right after the free (``Event.query()``: the free had to wait), whether it was still
pending when the snapshot was dumped, and how many frees of the workload were not planted (they
must not be listed as stuck). Nothing here reads memscope's output.
"""

import json
import os

from . import run_each

MIB = 1 << 20
# torch.cuda._sleep spins this many cycles per millisecond at about 2 GHz; the truth is measured
# with CUDA events, not derived from it.
CYCLES_PER_MS = 2_000_000

WORKLOADS = ["one_side", "two_sides", "alloc_on_side", "still_pending", "training"]


def busy(stream, ms, torch):
    """Keeps `stream` busy about `ms`; the events that time it."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        start.record()
        torch.cuda._sleep(int(ms * CYCLES_PER_MS))
        end.record()
    return start, end


def plant(x, holder, ms, torch, planted, kind):
    """`x` used on `holder` kept busy ~ms, recorded there, then freed: its free waits."""
    start, end = busy(holder, ms, torch)
    with torch.cuda.stream(holder):
        x.mul_(2)
    x.record_stream(holder)
    planted.append({"address": x.data_ptr(), "size": x.untyped_storage().nbytes(), "kind": kind,
                    "events": (start, end), "planned_ms": ms, "tensor": x})


def free(planted):
    """Frees the last planted tensor (the caller holds no other reference) and notes whether its
    stream was still busy right then: a free that must wait."""
    p = planted[-1]
    del p["tensor"]
    p["busy_at_free"] = not p["events"][1].query()


def controls(torch, n, seed):
    """Frees nobody waits for: allocated, used and freed on the current stream."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        k = int(torch.randint(1, 2048, (1,), generator=g))
        y = torch.empty(k * 1024, dtype=torch.uint8, device="cuda")
        y.fill_(1)
        del y


def run(name, out):
    import torch
    # Kernels loaded and the streams made before recording: the first launch of a kernel can
    # block the host for milliseconds, long enough for a short wait to end before its free.
    side, side2 = torch.cuda.Stream(), torch.cuda.Stream()
    for s in (side, side2, torch.cuda.current_stream()):
        busy(s, 1, torch)
        with torch.cuda.stream(s):
            torch.empty(1, dtype=torch.uint8, device="cuda").fill_(0).mul_(2)
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=200_000)
    planted, not_planted = [], 0
    dumped_while_busy = False
    if name == "one_side":
        for mib, ms in [(1, 3), (3, 10), (12, 30), (48, 90)]:
            x = torch.empty(mib * MIB, dtype=torch.uint8, device="cuda")
            plant(x, side, ms, torch, planted, "default block, side stream busy")
            del x
            free(planted)
            controls(torch, 20, mib)  # allocations while it waits: none of them waits
            not_planted += 20
            torch.cuda.synchronize()
            torch.empty(1, device="cuda")  # the allocator notices the event done: free_completed
            not_planted += 1
    elif name == "two_sides":
        for i, (mib, stream, ms) in enumerate([(2, side, 5), (6, side2, 40), (10, side, 15), (20, side2, 60)]):
            x = torch.empty(mib * MIB, dtype=torch.uint8, device="cuda")
            plant(x, stream, ms, torch, planted, "default block, side stream %d busy" % (1 if stream is side else 2))
            del x
            free(planted)
            controls(torch, 10, i)
            not_planted += 10
        torch.cuda.synchronize()
        torch.empty(1, device="cuda")
        not_planted += 1
    elif name == "alloc_on_side":
        default = torch.cuda.current_stream()
        for mib, ms in [(4, 8), (16, 25)]:
            with torch.cuda.stream(side):
                x = torch.empty(mib * MIB, dtype=torch.uint8, device="cuda")
                x.fill_(0)
            # Made on the side stream, used on the default one (busy): its free waits there.
            plant(x, default, ms, torch, planted, "side-stream block, default stream busy")
            del x
            free(planted)
            torch.cuda.synchronize()
            with torch.cuda.stream(side):
                torch.empty(1, device="cuda")  # the side stream's pool notices: free_completed
            not_planted += 1
        controls(torch, 30, 7)
        not_planted += 30
    elif name == "still_pending":
        x = torch.empty(24 * MIB, dtype=torch.uint8, device="cuda")
        plant(x, side, 1500, torch, planted, "default block, still pending at the dump")
        del x
        free(planted)
        controls(torch, 15, 3)
        not_planted += 15
        dumped_while_busy = True
    elif name == "training":
        # No record_stream at all: a small MLP trained for a few steps; nothing must be listed.
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
        opt = torch.optim.AdamW(model.parameters())
        for _ in range(8):
            loss = model(torch.randn(256, 1024, device="cuda")).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
    path = os.path.join(out, "pending_%s.pickle" % name)
    torch.cuda.memory._dump_snapshot(path)
    still = torch.cuda.memory_stats().get("active.all.current", 0)
    torch.cuda.synchronize()
    for p in planted:
        start, end = p.pop("events")
        p["busy_ms"] = start.elapsed_time(end)
        p["still_pending"] = dumped_while_busy
    truth = {"workload": name, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
             "planted": planted, "not_planted_frees_at_least": not_planted, "active_blocks_at_dump": still}
    with open(os.path.join(out, "pending_%s.truth.json" % name), "w") as f:
        json.dump(truth, f, indent=1)
    print(name, json.dumps(planted))


def main():
    run_each("memscope_harness.pending", __doc__, WORKLOADS, run)


if __name__ == "__main__":
    main()
