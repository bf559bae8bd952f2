"""The peaks proof on models the what-if workloads do not cover:
``python -m memscope_harness.peaks --out DIR --memscope BIN``

Each workload runs in a fresh process with history recorded from before its first allocation, and
writes ``NAME.json`` with ``torch.cuda.memory_stats()``'s three peaks (requested, allocated,
reserved) read right before ``NAME.pickle`` is dumped. Then ``memscope analyze --json`` must give
the same three figures to the byte for each (``whatif.check_peaks``), and say they cover the
whole process. Exit status 1 when any is off.
"""

import argparse
import json
import os
import subprocess
import sys

from memscope_harness.whatif import check_peaks

MIB = 1 << 20


def gpt_autocast(torch):
    """A small GPT-style decoder trained with AdamW under bf16 autocast, gradient accumulation of
    two micro-batches and a growing sequence length."""
    layer = torch.nn.TransformerDecoderLayer(768, 12, 3072, batch_first=True, norm_first=True)
    model = torch.nn.TransformerDecoder(layer, 6).cuda()
    head = torch.nn.Linear(768, 32000).cuda()
    opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=1e-4)
    for step, seq in enumerate([128, 256, 384, 512, 256, 640]):
        for _ in range(2):
            x = torch.randn(4, seq, 768, device="cuda")
            mask = torch.nn.Transformer.generate_square_subsequent_mask(seq, device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                h = model(x, x, tgt_mask=mask)
                logits = head(h)
                loss = torch.nn.functional.cross_entropy(logits.float().view(-1, 32000),
                                                         torch.randint(0, 32000, (4 * seq,), device="cuda"))
            (loss / 2).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def cnn_checkpointed(torch):
    """A residual conv net with activation checkpointing over its blocks, SGD with momentum,
    channels-last, gradients zeroed in place (kept between steps), varying image size."""
    from torch.utils.checkpoint import checkpoint

    class Block(torch.nn.Module):
        def __init__(self, c):
            super().__init__()
            self.a = torch.nn.Conv2d(c, c, 3, padding=1)
            self.b = torch.nn.Conv2d(c, c, 3, padding=1)
            self.n = torch.nn.BatchNorm2d(c)

        def forward(self, x):
            return x + self.b(torch.relu(self.n(self.a(x))))

    stem = torch.nn.Conv2d(3, 128, 3, padding=1).cuda()
    blocks = torch.nn.ModuleList(Block(128) for _ in range(6)).cuda().to(memory_format=torch.channels_last)
    head = torch.nn.Linear(128, 100).cuda()
    params = list(stem.parameters()) + list(blocks.parameters()) + list(head.parameters())
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    for side in [96, 160, 128, 224]:
        x = torch.randn(16, 3, side, side, device="cuda").to(memory_format=torch.channels_last)
        h = stem(x)
        for b in blocks:
            h = checkpoint(b, h, use_reentrant=False)
        loss = torch.nn.functional.cross_entropy(head(h.mean((2, 3))), torch.randint(0, 100, (16,), device="cuda"))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)


def generate_release(torch):
    """Batched generation with a preallocated then grown KV cache, a side stream that copies
    results out (record_stream), and empty_cache between batches: reserved memory rises and falls,
    so the reserved peak lies mid-trace."""
    side = torch.cuda.Stream()
    w = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    for batch in [8, 32, 16]:
        cache = torch.zeros(batch, 16, 64, 64, device="cuda", dtype=torch.float16)
        for t in range(96):
            q = torch.randn(batch, 1024, device="cuda", dtype=torch.float16) @ w
            if t % 32 == 31:
                cache = torch.cat([cache, torch.zeros_like(cache)], dim=2)
            with torch.cuda.stream(side):
                host = q.to("cpu", non_blocking=True)
            q.record_stream(side)
            del q, host
        torch.cuda.synchronize()
        del cache
        torch.cuda.empty_cache()


WORKLOADS = {"gpt_autocast": gpt_autocast, "cnn_checkpointed": cnn_checkpointed,
             "generate_release": generate_release}
SETTINGS = ["", "expandable_segments:True"]


def one_run(workload, name, out):
    import torch
    torch.cuda.init()
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    WORKLOADS[workload](torch)
    torch.cuda.synchronize()
    st = torch.cuda.memory_stats()
    base = os.path.join(out, name)
    torch.cuda.memory._dump_snapshot(base + ".pickle")
    with open(base + ".json", "w") as f:
        json.dump({"workload": workload, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                   "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
                   "peak_requested_bytes": st["requested_bytes.all.peak"],
                   "peak_allocated_bytes": st["allocated_bytes.all.peak"],
                   "peak_reserved_bytes": st["reserved_bytes.all.peak"]}, f, indent=1)


def main():
    ap = argparse.ArgumentParser(prog="python -m memscope_harness.peaks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--memscope", default="memscope")
    ap.add_argument("--run", nargs=2, metavar=("WORKLOAD", "NAME"))
    args = ap.parse_args()
    if args.run:
        return one_run(args.run[0], args.run[1], args.out)
    os.makedirs(args.out, exist_ok=True)
    env0 = dict(os.environ)
    env0["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                          env0.get("PYTHONPATH", "")])
    bad = 0
    for w in WORKLOADS:
        for conf in SETTINGS:
            name = "%s.%s" % (w, conf.replace(":", "_") or "default")
            p = subprocess.run([sys.executable, "-m", "memscope_harness.peaks", "--out", args.out,
                                "--run", w, name], env=dict(env0, PYTORCH_CUDA_ALLOC_CONF=conf),
                               capture_output=True, text=True)
            if p.returncode != 0:
                print("run %s failed:\n%s" % (name, p.stderr[-2000:]), flush=True)
                bad += 1
                continue
            with open(os.path.join(args.out, name + ".json")) as f:
                bad += check_peaks(args, name, json.load(f))
    print("%d peak checks off" % bad)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
