"""Record the ~1M-entry benchmark snapshot (C++ + Python stacks) on a GPU host.

Why this exists: the engine's speed and memory targets (issue 2) are measured on a realistic
large snapshot: a transformer training loop recorded with `_record_memory_history(max_entries=1_000_000)`
and PyTorch's default `stacks="all"` (C++ and Python frames). The file is ~160 MB, too big for git, so
this script is the recipe. Run on a CUDA machine:

    python3 bench/make_big_snapshot.py OUT_DIR [--steps 400]

It writes OUT_DIR/big_cpp.pickle plus OUT_DIR/big_cpp.meta.json (entries, timings).
"""
import argparse, json, os, sys, time

import torch
import torch.nn as nn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--max-entries", type=int, default=1_000_000)
    ap.add_argument("--budget-s", type=float, default=150.0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    d_model, layers = 512, 6
    enc = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(d_model, 8, 2048, batch_first=True), layers
    ).to(dev)
    head = nn.Linear(d_model, 1000).to(dev)
    params = list(enc.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    torch.cuda.memory._record_memory_history(max_entries=a.max_entries)  # stacks="all" by default
    t0 = time.time()
    steps = 0
    for step in range(a.steps):
        seq = 64 + (step * 37) % 192  # varying sequence lengths, as real jobs see
        x = torch.randn(16, seq, d_model, device=dev)
        y = torch.randint(0, 1000, (16, seq), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = head(enc(x))
            loss = nn.functional.cross_entropy(out.float().view(-1, 1000), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        steps += 1
        if time.time() - t0 > a.budget_s:
            break
    torch.cuda.synchronize()
    train_s = time.time() - t0
    t1 = time.time()
    snap = torch.cuda.memory._snapshot()
    snap_s = time.time() - t1
    entries = sum(len(t) for t in snap["device_traces"])
    path = os.path.join(a.out, "big_cpp.pickle")
    t2 = time.time()
    import pickle
    with open(path, "wb") as f:
        pickle.dump(snap, f)
    dump_s = time.time() - t2
    meta = dict(steps=steps, train_s=train_s, snapshot_s=snap_s, dump_s=dump_s, entries=entries,
                bytes=os.path.getsize(path), torch=torch.__version__,
                gpu=torch.cuda.get_device_name())
    json.dump(meta, open(os.path.join(a.out, "big_cpp.meta.json"), "w"), indent=1)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
