"""The categories proof: ``python -m memscope_harness.categories --out DIR [--verify --memscope BIN]``

Real training, each workload in a fresh process, recorded with ``_record_memory_history`` and,
in the same process, the truth of what every live storage is, by address, at marked moments of
the first and the last step (after forward, after backward, after ``optimizer.step``):

- parameters: ``p.untyped_storage()`` of ``model.parameters()``;
- gradients: ``p.grad``;
- optimizer state: the CUDA tensors in ``optimizer.state``;
- activations: what autograd saved for backward (a ``saved_tensors_hooks`` pack hook around the
  forward pass, storages followed by weak reference so only those still saved count; for the
  compiled model, the graph's saved tensors read off its nodes, since Dynamo does not trace
  through pack hooks; for checkpointed blocks, the block inputs checkpointing keeps for the
  recompute), minus parameters and inputs;
- inputs: the batch.

A moment is marked in the trace by an allocation of a size nothing else has, freed at once:
its event index is found in the snapshot taken in the same process, so the position memscope is
asked about is exact. Each run writes ``NAME.json`` (the truth) and ``NAME.pickle``.

``--verify`` asks ``memscope categories FILE --at POSITION --json`` at every moment and prints,
per workload and category, the bytes labelled right out of the bytes known (exit status 1 below
95% anywhere).

One run: ``python -m memscope_harness.categories run WORKLOAD --stacks python|all|none --out DIR``.
"""

import argparse
import json
import os
import pickle
import subprocess
import sys
import time

from memscope_harness.whatif import harness_env, spawn_all

MIB = 1 << 20
CATEGORIES = ["parameter", "gradient", "optimizer_state", "activation", "input"]
# Marker sizes: odd byte counts under 1 MiB (the small pool: no segment of their own), which no
# tensor of the workloads has.
MARK_BASE = 700_001
GOAL = 0.95


class Truth:
    """Collects the truth at each moment of one run."""

    def __init__(self, torch, model, opt, steps):
        from torch.multiprocessing.reductions import StorageWeakRef
        self.torch, self.model, self.opt = torch, model, opt
        self.weak = StorageWeakRef
        self.saved = []  # (ptr, nbytes, weak ref) of storages autograd saved in this forward
        self.inputs = []
        self.kept = []  # storages checkpointing keeps for its recompute
        self.moments = []
        self.errors = []
        self.step = 0
        self.steps = steps

    # --- what autograd saves ---
    def pack(self, t):
        if t.is_cuda:
            s = t.untyped_storage()
            self.saved.append((s.data_ptr(), s.nbytes(), self.weak(s)))
        return t

    def hooks(self):
        return self.torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)

    def keep(self, t):
        """A checkpointed block's input, held for the recompute in backward."""
        s = t.untyped_storage()
        self.saved.append((s.data_ptr(), s.nbytes(), self.weak(s)))
        return t

    def from_graph(self, loss):
        """The saved tensors of the graph behind `loss`, read off its nodes (compiled models)."""
        # Nodes are kept while walking: a C++ node's Python wrapper is made anew on each access,
        # and a freed wrapper's id() may be reused by the next one.
        seen, kept, todo = set(), [], [loss.grad_fn]
        while todo:
            n = todo.pop()
            if n is None or id(n) in seen:
                continue
            seen.add(id(n))
            kept.append(n)
            found = []
            for name in dir(n):
                if name.startswith("_saved_"):
                    try:
                        found.append(getattr(n, name))
                    except Exception:
                        pass
            if type(n).__name__.endswith("Backward") and not type(n).__name__.endswith("0"):
                # A Python autograd.Function's node (the compiled graph's): its ctx's tensors.
                try:
                    found.append(list(n.saved_tensors))
                except Exception as e:
                    self.errors.append("%s: %r" % (type(n).__name__, e))
            for v in found:
                for t in (v if isinstance(v, (list, tuple)) else [v]):
                    if isinstance(t, self.torch.Tensor) and t.is_cuda:
                        self.pack(t)
            todo += [f for f, _ in n.next_functions]

    def backward_done(self):
        """The graph is freed: nothing is saved for backward any more."""
        self.saved = []

    def batch(self, *tensors):
        self.inputs = list(tensors)
        return tensors if len(tensors) > 1 else tensors[0]

    # --- a moment ---
    def mark(self, name):
        torch = self.torch
        cats = {}

        def put(cat, storages):
            for ptr, n in storages:
                if ptr and ptr not in cats:
                    cats[ptr] = (cat, n)

        def st(t):
            s = t.untyped_storage()
            return s.data_ptr(), s.nbytes()

        params = list(self.model.parameters())
        put("parameter", [st(p) for p in params])
        # Buffers (batch norm's running statistics) are the model's too, and autograd may save
        # them: neither a parameter nor an activation, so not scored.
        put("buffer", [st(b) for b in self.model.buffers() if b.is_cuda])
        put("gradient", [st(p.grad) for p in params if p.grad is not None])
        put("optimizer_state", [st(v) for s in self.opt.state.values() for v in s.values()
                                if isinstance(v, torch.Tensor) and v.is_cuda])
        put("input", [st(t) for t in self.inputs if t.is_cuda])
        put("activation", [(p, n) for p, n, w in self.saved if not w.expired()])
        size = MARK_BASE + 2 * len(self.moments)
        m = torch.empty(size, dtype=torch.uint8, device="cuda")
        del m
        truth = {c: [] for c in CATEGORIES + ["buffer"]}
        for ptr, (c, n) in sorted(cats.items()):
            truth[c].append([ptr, n])
        self.moments.append({"name": "step%d.%s" % (self.step, name), "step": self.step,
                             "marker_size": size, "truth": truth})

    def marking(self):
        return self.step in (0, self.steps - 1)

    def backward_and_step(self, loss, backward=None, step=None, zero=True):
        """The rest of a training step, its moments marked: after the forward pass, the backward
        pass (`backward(loss)`, default `loss.backward()`), the optimizer's step (`step()`,
        default `opt.step()`), then `zero_grad(set_to_none=True)` unless `zero` is off."""
        maybe(self, "after_forward")
        (backward or (lambda x: x.backward()))(loss)
        self.backward_done()
        maybe(self, "after_backward")
        (step or self.opt.step)()
        maybe(self, "after_step")
        if zero:
            self.opt.zero_grad(set_to_none=True)


def maybe(t, name):
    if t.marking():
        t.mark(name)


# ---- models --------------------------------------------------------------------------------------

def gpt(torch, vocab=8192, d=512, heads=8, layers=6, seq=256):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, s, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            x = self.emb(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    return GPT()


def tokens(torch, batch, seq=256, vocab=8192):
    x = torch.randint(0, vocab, (batch, seq + 1))
    return x[:, :-1].contiguous().cuda(), x[:, 1:].contiguous().cuda()


# ---- workloads: each trains `steps` steps and marks moments through `t` ------------------------

def gpt_bf16_adamw(torch, steps, record):
    """A GPT under bf16 autocast with AdamW (foreach), zero_grad after the step."""
    F = torch.nn.functional
    model = gpt(torch).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    t = Truth(torch, model, opt, steps)
    record()
    for t.step in range(steps):
        x, y = t.batch(*tokens(torch, 8))
        with t.hooks(), torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), y.view(-1))
        del logits
        t.backward_and_step(loss)
    return t


def convnet_sgd(torch, steps, record):
    """A conv net with batch norm, SGD with momentum, batches copied from pinned host memory,
    zero_grad before the forward pass."""
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
        nn.Conv2d(128, 256, 3, stride=2, padding=1), nn.BatchNorm2d(256), nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 100)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    t = Truth(torch, model, opt, steps)
    record()
    host = torch.randn(64, 3, 96, 96).pin_memory()
    for t.step in range(steps):
        opt.zero_grad()
        x, y = t.batch(host.to("cuda", non_blocking=True), torch.randint(0, 100, (64,)).cuda())
        with t.hooks():
            loss = nn.functional.cross_entropy(model(x), y)
        t.backward_and_step(loss, zero=False)
    return t


def mlp_checkpoint_adam(torch, steps, record):
    """A deep MLP whose blocks are checkpointed (non-reentrant: recomputed in backward), Adam."""
    from torch.utils.checkpoint import checkpoint
    nn = torch.nn
    blocks = nn.ModuleList(nn.Sequential(*[m for _ in range(3) for m in (nn.Linear(2048, 2048), nn.GELU())])
                           for _ in range(4))
    model = nn.Sequential(nn.Linear(1024, 2048), blocks, nn.Linear(2048, 10)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    t = Truth(torch, model, opt, steps)
    record()
    for t.step in range(steps):
        x, y = t.batch(torch.randn(2048, 1024, device="cuda"), torch.randint(0, 10, (2048,), device="cuda"))
        with t.hooks():
            h = model[0](x)
            for blk in blocks:
                h = checkpoint(blk, t.keep(h), use_reentrant=False)
            loss = nn.functional.cross_entropy(model[2](h), y)
        del h
        t.backward_and_step(loss)
    return t


def gpt_accumulate(torch, steps, record, micro=4):
    """A GPT in fp32 with AdamW, four micro-batches accumulated into each step's gradients; the
    history starts before the model is made (its parameters' allocations are in the trace)."""
    F = torch.nn.functional
    record()
    model = gpt(torch, d=384, layers=4).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    t = Truth(torch, model, opt, steps)
    for t.step in range(steps):
        for k in range(micro):
            x, y = t.batch(*tokens(torch, 4))
            with t.hooks():
                logits = model(x)
                loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1)) / micro
            del logits
            if k == micro - 1:
                maybe(t, "after_forward")
            loss.backward()
            t.backward_done()
            if k in (0, micro - 1):
                maybe(t, "after_backward%d" % k)
        opt.step()
        maybe(t, "after_step")
        opt.zero_grad(set_to_none=True)
    return t


def gpt_compiled(torch, steps, record):
    """A GPT compiled with torch.compile (Inductor), Adam."""
    F = torch.nn.functional
    model = gpt(torch, d=384, layers=4).cuda()
    fast = torch.compile(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    t = Truth(torch, model, opt, steps)
    record()
    for t.step in range(steps):
        x, y = t.batch(*tokens(torch, 8))
        logits = fast(x)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        del logits
        t.from_graph(loss)
        t.backward_and_step(loss)
    return t


def lstm_lm(torch):
    """A two-layer cuDNN LSTM language model (vocabulary 8192): what this proof and the will-it-fit
    sweep (predict.py) both train."""
    nn = torch.nn

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(8192, 512)
            self.rnn = nn.LSTM(512, 1024, num_layers=2, batch_first=True)
            self.head = nn.Linear(1024, 8192)

        def forward(self, x):
            return self.head(self.rnn(self.emb(x))[0])

    return LM()


def lstm_rmsprop(torch, steps, record):
    """A two-layer cuDNN LSTM language model with RMSprop, recorded from before the model is
    made."""
    record()
    model = lstm_lm(torch).cuda()
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-4)
    t = Truth(torch, model, opt, steps)
    for t.step in range(steps):
        x, y = t.batch(*tokens(torch, 16, seq=128))
        with t.hooks():
            loss = nn.functional.cross_entropy(model(x).view(-1, 8192), y.view(-1))
        t.backward_and_step(loss)
    return t


def resumed_fused_adamw(torch, steps, record):
    """A run resumed mid-training: the history starts after three steps, so the parameters and
    the optimizer state (fused AdamW: its step counters live on the GPU too) predate the trace."""
    F = torch.nn.functional
    model = gpt(torch, d=384, layers=4).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    t = Truth(torch, model, opt, steps)
    for _ in range(3):
        x, y = tokens(torch, 8)
        F.cross_entropy(model(x).view(-1, 8192), y.view(-1)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    del x, y
    record()
    for t.step in range(steps):
        x, y = t.batch(*tokens(torch, 8))
        with t.hooks():
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, 8192), y.view(-1))
        del logits
        t.backward_and_step(loss)
    return t


def vit_fp16_scaler(torch, steps, record):
    """Held out: a vision transformer (PyTorch's own encoder layers) under fp16 autocast with a
    GradScaler and AdamW, gradients zeroed in place (``set_to_none=False``), so they are made in
    the first backward pass and kept for good."""
    nn = torch.nn

    class ViT(nn.Module):
        def __init__(self, d=384):
            super().__init__()
            self.patch = nn.Conv2d(3, d, 16, stride=16)
            layer = nn.TransformerEncoderLayer(d, 6, 4 * d, batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
            self.head = nn.Linear(d, 100)

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2)
            return self.head(self.encoder(x).mean(1))

    record()
    model = ViT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    t = Truth(torch, model, opt, steps)
    for t.step in range(steps):
        x, y = t.batch(torch.randn(32, 3, 224, 224, device="cuda"), torch.randint(0, 100, (32,), device="cuda"))
        with t.hooks(), torch.autocast("cuda", dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(x), y)
        t.backward_and_step(loss, backward=lambda x: scaler.scale(x).backward(),
                            step=lambda: (scaler.step(opt), scaler.update()), zero=False)
        opt.zero_grad(set_to_none=False)
    return t


def gpt_lora(torch, steps, record):
    """Held out: a GPT whose weights are frozen, with low-rank adapters on its attention and MLP
    projections trained by AdamW: most parameters get no gradient and no optimizer state."""
    nn = torch.nn
    F = nn.functional

    class LoRA(nn.Module):
        def __init__(self, base, rank=16):
            super().__init__()
            self.base = base
            self.a = nn.Parameter(torch.randn(rank, base.in_features) * 0.01)
            self.b = nn.Parameter(torch.zeros(base.out_features, rank))

        def forward(self, x):
            return self.base(x) + (x @ self.a.t()) @ self.b.t()

    model = gpt(torch)
    for p in model.parameters():
        p.requires_grad_(False)
    for blk in model.blocks:
        blk.qkv, blk.fc = LoRA(blk.qkv), LoRA(blk.fc)
    model = model.cuda()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    t = Truth(torch, model, opt, steps)
    record()
    for t.step in range(steps):
        x, y = t.batch(*tokens(torch, 8))
        with t.hooks():
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, 8192), y.view(-1))
        del logits
        t.backward_and_step(loss)
    return t


def loader_clip_schedule(torch, steps, record):
    """Held out: a training loop as a trainer library writes it: batches from a DataLoader with
    pinned memory copied without blocking, a transformer encoder (PyTorch's layers), gradient
    clipping, AdamW with a learning-rate schedule, the loss read with ``.item()`` every step."""
    nn = torch.nn
    data = torch.utils.data.TensorDataset(torch.randn(steps * 16, 128, 256), torch.randint(0, 10, (steps * 16,)))
    loader = torch.utils.data.DataLoader(data, batch_size=16, pin_memory=True)
    record()
    layer = nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, 4, enable_nested_tensor=False), nn.Flatten(1),
                          nn.Linear(128 * 256, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=steps)
    t = Truth(torch, model, opt, steps)
    losses = []
    for t.step, (xb, yb) in enumerate(loader):
        x, y = t.batch(xb.to("cuda", non_blocking=True), yb.to("cuda", non_blocking=True))
        with t.hooks():
            loss = nn.functional.cross_entropy(model(x), y)
        t.backward_and_step(loss, step=lambda: (nn.utils.clip_grad_norm_(model.parameters(), 1.0),
                                                opt.step(), sched.step()))
        losses.append(loss.item())
    return t


def ddp_bucket_view(torch, steps, record):
    """DDP as above with ``gradient_as_bucket_view=True``: the gradients are views of the
    reducer's buckets, made with the model, never by a backward pass."""
    return ddp_one_rank(torch, steps, record, bucket_view=True)


def ddp_one_rank(torch, steps, record, bucket_view=False):
    """Held out: DistributedDataParallel over NCCL with one rank (its reducer's gradient buckets
    are made with the model and kept), an MLP with SGD and momentum."""
    import socket
    import torch.distributed as dist
    nn = torch.nn
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port, rank=0, world_size=1)
    record()
    net = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                        nn.Linear(4096, 1024)).cuda()
    model = nn.parallel.DistributedDataParallel(net, gradient_as_bucket_view=bucket_view)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    t = Truth(torch, net, opt, steps)
    for t.step in range(steps):
        x, y = t.batch(torch.randn(512, 1024, device="cuda"), torch.randn(512, 1024, device="cuda"))
        with t.hooks():
            loss = nn.functional.mse_loss(model(x), y)
        t.backward_and_step(loss)
    dist.destroy_process_group()
    return t


WORKLOADS = {"gpt_bf16_adamw": gpt_bf16_adamw, "convnet_sgd": convnet_sgd,
             "mlp_checkpoint_adam": mlp_checkpoint_adam, "gpt_accumulate": gpt_accumulate,
             "gpt_compiled": gpt_compiled, "lstm_rmsprop": lstm_rmsprop,
             "resumed_fused_adamw": resumed_fused_adamw, "vit_fp16_scaler": vit_fp16_scaler,
             "gpt_lora": gpt_lora, "loader_clip_schedule": loader_clip_schedule,
             "ddp_one_rank": ddp_one_rank, "ddp_bucket_view": ddp_bucket_view}
# Written after the classifier, to check it on programs it was not tuned on.
HELD_OUT = {"vit_fp16_scaler", "gpt_lora", "loader_clip_schedule", "ddp_one_rank"}
# Every workload with Python-only and with C++ and Python stacks; a few without any frames.
STACKS = {"python": list(WORKLOADS), "all": list(WORKLOADS),
          "none": ["gpt_bf16_adamw", "mlp_checkpoint_adam", "convnet_sgd"]}
STEPS = 4


def find_markers(snap, moments):
    """Each moment's position: after its marker's `free_completed` (the marker alive in between)."""
    trace = snap["device_traces"][0]
    by_size = {m["marker_size"]: m for m in moments}
    for i, e in enumerate(trace):
        m = by_size.get(e.get("size")) if e["action"] == "alloc" else None
        if m is None or "alloc_event" in m:
            continue
        m["alloc_event"] = i
        for j in range(i + 1, len(trace)):
            if trace[j]["action"] == "free_completed" and trace[j]["addr"] == e["addr"]:
                m["position"] = j + 1
                break
    missing = [m["name"] for m in moments if "position" not in m]
    if missing:
        raise RuntimeError("markers not found in the trace: %s" % missing)


def one_run(args):
    import torch
    torch.cuda.init()

    def record():
        if args.stacks == "none":
            torch.cuda.memory._record_memory_history(max_entries=1_000_000, context=None)
        else:
            torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks=args.stacks)

    torch.manual_seed(0)
    t = WORKLOADS[args.workload](torch, STEPS, record)
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    if len(snap["device_traces"][0]) >= 1_000_000:
        raise RuntimeError("the trace filled its ring buffer: positions would shift")
    find_markers(snap, t.moments)
    base = os.path.join(args.out, args.name)
    with open(base + ".pickle", "wb") as f:
        pickle.dump(snap, f)  # what torch.cuda.memory._dump_snapshot writes
    with open(base + ".json", "w") as f:
        json.dump({"workload": args.workload, "stacks": args.stacks, "torch": torch.__version__,
                   "gpu": torch.cuda.get_device_name(0), "steps": STEPS,
                   "doc": WORKLOADS[args.workload].__doc__, "held_out": args.workload in HELD_OUT,
                   "errors": t.errors, "moments": t.moments}, f)


def run_jobs(args, jobs):
    env = harness_env()
    spawn_all(((name, [sys.executable, "-m", "memscope_harness.categories", "run", w, "--name", name,
                       "--out", args.out, "--stacks", stacks], env) for name, w, stacks in jobs),
              args.parallel)


def record_all(args):
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    jobs = [("%s.%s" % (w, s), w, s) for s, ws in STACKS.items() for w in ws if w in args.workloads]
    # The compiled ones first: they take longest.
    jobs.sort(key=lambda j: "compiled" not in j[1])
    run_jobs(args, jobs)
    print("%d runs in %.0f s" % (len(jobs), time.time() - t0), flush=True)


# ---- verify --------------------------------------------------------------------------------------

def labels_at(args, pickle_path, position):
    out = subprocess.run([args.memscope, "categories", pickle_path, "--at", str(position), "--json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    return {a["address"]: a for a in json.loads(out.stdout)["allocations"]}


def verify(args):
    runs = sorted(f[:-5] for f in os.listdir(args.out) if f.endswith(".json") and os.path.exists(
        os.path.join(args.out, f[:-5] + ".pickle")))
    bad = 0
    print("\n%-34s %s" % ("run", "  ".join("%17s" % c for c in CATEGORIES)))
    for stem in runs:
        with open(os.path.join(args.out, stem + ".json")) as f:
            truth = json.load(f)
        right = {c: 0 for c in CATEGORIES}
        known = {c: 0 for c in CATEGORIES}
        labelled = {c: 0 for c in CATEGORIES}  # bytes of known storages labelled c
        split = set()  # categories memscope split by count (it says which block is which is unknown)
        for m in truth["moments"]:
            got = labels_at(args, os.path.join(args.out, stem + ".pickle"), m["position"])
            for c in CATEGORIES:
                for ptr, n in m["truth"][c]:
                    a = got.get(ptr)
                    size = a["size"] if a else n
                    known[c] += size
                    right[c] += size if a and a["category"] == c else 0
                    if a and a["category"] in labelled:
                        labelled[a["category"]] += size
                        if a["rule"] == "split_by_gradient_count":
                            split.add(a["category"])
        cells = []
        for c in CATEGORIES:
            if known[c] == 0:
                cells.append("%17s" % "-")
                continue
            if c in split:
                ratio = labelled[c] / known[c]
                bad += abs(ratio - 1) > 0.02
                cells.append("%8.1f%% by count*" % (100 * ratio))
                continue
            share = right[c] / known[c]
            bad += share < GOAL
            cells.append("%8.1f%% of %5.0fM" % (100 * share, known[c] / MIB))
        print("%-34s %s" % (stem, "  ".join(cells)), flush=True)
    print("\n* made before the trace (a resumed run): which same-size block is a parameter and which"
          " optimizer state is not in the trace; memscope splits them by the count of gradients of each"
          " size, and the bytes by count are what is checked.")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(prog="python -m memscope_harness.categories",
                                 description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    one = sub.add_parser("run")
    one.add_argument("workload", choices=sorted(WORKLOADS))
    one.add_argument("--name", required=True)
    one.add_argument("--out", required=True)
    one.add_argument("--stacks", default="python", choices=sorted(STACKS))
    ap.add_argument("--out", default="./memscope-categories-out")
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
        record_all(args)
    if args.verify or args.verify_only:
        sys.exit(verify(args))


if __name__ == "__main__":
    main()
