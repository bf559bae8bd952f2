"""Generates a job's worth of per-rank snapshots for the run benchmark (issue 15).

    python3 bench/make_rank_set.py OUT_DIR --ranks 64 --events 100000

Writes OUT_DIR/rank{r}_memory_snapshot.pickle, each shaped as PyTorch 2.x writes it (protocol 4,
a `segments` list, `device_traces`, `external_annotations` with `ProfilerStep#N` marks, frame
dicts shared between entries as PyTorch shares them) and each a plausible training loop: weights
allocated once, then steps of activations allocated and freed, on one clock for all ranks.
Ranks differ on purpose: rank r holds r × 16 MiB more at its own line (a pipeline stage with
more layers), and the last rank runs out of memory in its last step. Our own data: written with
`pickle.dump`, never loaded from a user's file.
"""

import argparse
import os
import pickle
import random

MIB = 1 << 20


def frame(filename, line, name):
    return {"filename": filename, "line": line, "name": name}


def make_rank(rank, ranks, events, t0_us, seed):
    rnd = random.Random(seed + rank)
    train = frame("/job/train.py", 120, "train_step")
    frames = {
        "weights": [frame("/job/model.py", 40, "__init__"), train],
        "stage": [frame("/job/pipeline.py", 77 + rank % 3, "build_stage"), train],
        "act": [[frame("/job/model.py", 60 + k, "forward"), train] for k in range(8)],
        "grad": [[frame("/torch/autograd/graph.py", 744, "_engine_run_backward"), train]],
        "oom": [frame("/job/model.py", 95, "attention"), train],
    }
    trace, annotations = [], []
    t = t0_us + rnd.randrange(0, 2000)
    addr = 0x7F0000000000 + rank * (1 << 40)
    seg_size = 2 << 30  # one segment holds the largest rank's peak
    trace.append({"action": "segment_alloc", "addr": addr, "size": seg_size, "stream": 0, "time_us": t,
                  "frames": frames["weights"]})
    nxt = addr

    def alloc(size, fr):
        nonlocal nxt, t
        a = nxt
        nxt += (size + 511) // 512 * 512
        t += rnd.randrange(5, 40)
        trace.append({"action": "alloc", "addr": a, "size": size, "stream": 0, "time_us": t, "frames": fr})
        return a, size, fr

    def free(block):
        nonlocal t
        a, size, fr = block
        for action in ("free_requested", "free_completed"):
            t += rnd.randrange(1, 10)
            trace.append({"action": action, "addr": a, "size": size, "stream": 0, "time_us": t, "frames": fr})

    alloc(512 * MIB, frames["weights"])
    if rank:
        alloc(rank * 16 * MIB, frames["stage"])
    persistent_end = nxt  # each step's blocks reuse the addresses after what stays
    step = 0
    per_step = 8 * 3 + 2 * 3  # allocs and two frees each
    steps = max(1, (events - len(trace)) // per_step)
    for step in range(steps):
        annotations.append({"name": "ProfilerStep#%d" % step, "stage": "START", "device": 0, "time_us": t})
        nxt = persistent_end
        acts = [alloc(rnd.choice([2, 4, 8, 16]) * MIB, frames["act"][k]) for k in range(8)]
        grads = [alloc(4 * MIB, frames["grad"][0]) for _ in range(2)]
        if rank == ranks - 1 and step == steps - 1:
            t += 50
            trace.append({"action": "oom", "addr": 0, "size": 40 << 30, "stream": 0, "time_us": t,
                          "device_free": 1 << 30, "frames": frames["oom"]})
            break
        for b in reversed(acts):
            free(b)
        for b in grads:
            free(b)
        annotations.append({"name": "ProfilerStep#%d" % step, "stage": "END", "device": 0, "time_us": t})
        t += rnd.randrange(200, 800)
    segments = [{"device": 0, "address": addr, "total_size": seg_size, "allocated_size": 0, "active_size": 0,
                 "requested_size": 0, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                 "is_expandable": False, "frames": frames["weights"],
                 "blocks": [{"address": addr, "size": seg_size, "requested_size": 0, "state": "inactive",
                             "frames": []}]}]
    return {"segments": segments, "device_traces": [trace], "external_annotations": annotations,
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": False}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=15)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = 1_795_000_000_000_000
    for r in range(args.ranks):
        snap = make_rank(r, args.ranks, args.events, t0, args.seed)
        with open(os.path.join(args.out, "rank%d_memory_snapshot.pickle" % r), "wb") as f:
            pickle.dump(snap, f, protocol=4)
    print("%d ranks of %d events in %s" % (args.ranks, len(snap["device_traces"][0]), args.out))


if __name__ == "__main__":
    main()
