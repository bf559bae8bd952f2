"""Memory held over time, planted on a GPU with its ground truth (issue 40: the flame graph
weighed by bytes x lifetime).

``python -m memscope_harness.held --out DIR [--workloads a,b]`` runs each workload in its own
process. A workload records the allocator's history, makes tensors at known lines, times each
one's life on the host clock (``time.perf_counter_ns`` just before and just after the call that
makes it, and just before and after the ``del`` that frees it; the device synchronized first so
that the free is the allocator's), and writes ``held_<workload>.pickle`` beside
``held_<workload>.truth.json``: per line, the tensors' bytes (``untyped_storage().nbytes()``)
and the byte x microseconds they held in all, as bounds: at least from just after the making to
just before the free, at most from just before the making to just after the free. A tensor alive
at the dump is held until the last allocator call before it (a marker allocation, bounded the
same way). Nothing here reads memscope's output.

- ``planted``: a small buffer held through the run, large temporaries held a few milliseconds
  each, medium tensors held ~80 ms each: the largest at the peak is not what held memory
  longest.
- ``training``: an MLP trained with AdamW for a few steps: its parameters (made at one line) and
  the optimizer's state (made inside the first ``step()``) are held from their making to the
  end; the activations are larger at the peak but live a forward and backward each.
- ``growing``: a cache that grows by 64 MiB a step beside a 1 GiB scratch tensor each step; the
  older half of the cache is dropped at the end.
"""

import inspect
import json
import os
import time

from . import run_each

MIB = 1 << 20
WORKLOADS = ["planted", "training", "growing"]


def now_us():
    return time.perf_counter_ns() / 1000.0


def here():
    """The caller's line."""
    return inspect.currentframe().f_back.f_lineno


class Truth:
    """Per line: the tensors made there, each [bytes, (made after, made before), (freed after,
    freed before)] on the host clock: the call that made it ran between the first two times, the
    free between the last two."""

    def __init__(self):
        self.lines = {}

    def made(self, line, tensors, t0, t1):
        for x in tensors:
            self.lines.setdefault(line, []).append([x.untyped_storage().nbytes(), (t0, t1), None])

    def freed(self, line, t0, t1):
        for rec in self.lines[line]:
            if rec[2] is None:
                rec[2] = (t0, t1)

    def finish(self, end):
        out = {}
        for line, recs in self.lines.items():
            spans = [(b, made, freed or end) for b, made, freed in recs]
            out[str(line)] = {
                "tensors": len(recs),
                "bytes": sum(b for b, _, _ in spans),
                "alive_at_dump": sum(1 for r in recs if r[2] is None),
                "held_byte_us_at_least": sum(b * (freed[0] - made[1]) for b, made, freed in spans),
                "held_byte_us_at_most": sum(b * (freed[1] - made[0]) for b, made, freed in spans),
                "longest_us": max(freed[1] - made[0] for _, made, freed in spans),
            }
        return out


def planted(torch, truth):
    t0 = now_us(); small = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda"); small_line = here()
    truth.made(small_line, [small], t0, now_us())
    small.fill_(1)
    for i in range(10):
        torch.cuda.synchronize()
        t0 = now_us(); big = torch.empty(2048 * MIB, dtype=torch.uint8, device="cuda"); big_line = here()
        truth.made(big_line, [big], t0, now_us())
        big.fill_(i)
        torch.cuda.synchronize()
        time.sleep(0.003)
        t0 = now_us()
        del big
        truth.freed(big_line, t0, now_us())
        time.sleep(0.01)
    for i in range(4):
        t0 = now_us(); medium = torch.empty(512 * MIB, dtype=torch.uint8, device="cuda"); medium_line = here()
        truth.made(medium_line, [medium], t0, now_us())
        medium.fill_(i)
        torch.cuda.synchronize()
        time.sleep(0.08)
        t0 = now_us()
        del medium
        truth.freed(medium_line, t0, now_us())
        time.sleep(0.02)
    time.sleep(0.1)
    return {"small": small_line, "big": big_line, "medium": medium_line}, [small]


def training(torch, truth):
    width = 4096
    layers = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)])
    t0 = now_us(); model = layers.cuda(); model_line = here()
    truth.made(model_line, list(model.parameters()), t0, now_us())
    # Fused: the step makes its state and no temporaries, so the step's line holds the state.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    step_line = None
    for step in range(6):
        x = torch.randn(8192, width, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        torch.cuda.synchronize()
        t0 = now_us(); opt.step(); step_line = here()
        if step == 0:
            # The optimizer's state is made inside the first step.
            state = [t for s in opt.state.values() for t in s.values() if t.is_cuda]
            truth.made(step_line, state, t0, now_us())
        opt.zero_grad(set_to_none=True)
        del x, loss
        torch.cuda.synchronize()
        time.sleep(0.05)
    return {"model": model_line, "step": step_line}, [model, opt]


def growing(torch, truth):
    cache, cache_line, temp_line = [], None, None
    for step in range(30):
        t0 = now_us(); kv = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda"); cache_line = here()
        truth.made(cache_line, [kv], t0, now_us())
        cache.append(kv.fill_(step))
        t0 = now_us(); scratch = torch.empty(1024 * MIB, dtype=torch.uint8, device="cuda"); temp_line = here()
        truth.made(temp_line, [scratch], t0, now_us())
        scratch.fill_(step)
        torch.cuda.synchronize()
        time.sleep(0.002)
        t0 = now_us()
        del scratch
        truth.freed(temp_line, t0, now_us())
        time.sleep(0.01)
    # The older half of the cache is dropped; the rest lives to the dump.
    torch.cuda.synchronize()
    t0 = now_us()
    old = cache[:15]
    del cache[:15]
    freed_at = (t0, None)
    del old
    freed_at = (t0, now_us())
    recs = truth.lines[cache_line]
    for rec in recs[:15]:
        rec[2] = freed_at
    time.sleep(0.1)
    return {"cache": cache_line, "scratch": temp_line}, cache


def run(name, out):
    import torch
    torch.empty(1, device="cuda").fill_(0)
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=200_000)
    truth = Truth()
    lines, keep = {"planted": planted, "training": training, "growing": growing}[name](torch, truth)
    torch.cuda.synchronize()
    # The last allocator call before the dump: what is still alive is held until here.
    t0 = now_us(); marker = torch.empty(1, device="cuda")
    del marker
    end = (t0, now_us())
    path = os.path.join(out, "held_%s.pickle" % name)
    torch.cuda.memory._dump_snapshot(path)
    doc = {"workload": name, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
           "file": os.path.abspath(__file__), "lines": lines, "held": truth.finish(end)}
    with open(os.path.join(out, "held_%s.truth.json" % name), "w") as f:
        json.dump(doc, f, indent=1)
    print(name, json.dumps(doc["held"]))
    del keep


def main():
    run_each("memscope_harness.held", __doc__, WORKLOADS, run)


if __name__ == "__main__":
    main()
