"""Real PyTorch snapshots at the engine bench's sizes (164 MB and 1 GB), recorded on a GPU host
(issue 41). The bench's other big files are tiled from one 2 MB recording
(bench/tile_snapshot.py); these are written by PyTorch itself, from models the engine was not
written against, so that the goals are measured on files of the shape users have.

    OUT=/some/dir python3 bench/record_real.py     # on a GPU host, through the device tool

Each recording is a training loop run until its ring buffer (`max_entries`) has wrapped, as a long
job's has: the trace then starts mid-run, with blocks allocated before it. `max_entries` is
sized from a probe of the same loop (its bytes per entry) to land near the target size. Python
stacks only (`stacks="python"`), as most users record.

What comes back under OUT: each file xz-compressed (compressed in pieces on every core and
concatenated, which `xz -d` and Python's `lzma` read as one stream), cut into parts of at most
15 MiB (`cat NAME.pickle.xz.part* > NAME.pickle.xz`), and `record_real.json`: per file its
size, entries, steps, recording and dump seconds, and `torch.cuda.memory_stats()` at the dump.
"""
import json, lzma, os, subprocess, sys, time
from concurrent.futures import ProcessPoolExecutor

OUT = os.environ["OUT"]
WORK = "/tmp/record_real"
PART_BYTES = 15 << 20
PIECE_BYTES = 32 << 20

CHILD = r'''
import json, os, pickle, sys, time, torch, torch.nn as nn
kind, path, target_bytes = sys.argv[1], sys.argv[2], int(sys.argv[3])
dev = torch.device("cuda")
torch.manual_seed(0)

if kind == "bert":
    from transformers import BertConfig, BertForMaskedLM
    cfg = BertConfig(vocab_size=8192, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                     intermediate_size=1024, max_position_embeddings=256)
    model = BertForMaskedLM(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    def step(i):
        seq = 64 + (i * 37) % 128
        ids = torch.randint(0, 8192, (8 + i % 5, seq), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i % 20 == 19:
            with torch.no_grad():
                model(input_ids=ids[:2])
elif kind == "resnet":
    import timm
    model = timm.create_model("resnet18", pretrained=False, num_classes=100).to(dev)
    model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    def step(i):
        x = torch.randn(16 + (i % 4) * 8, 3, 64, 64, device=dev).to(memory_format=torch.channels_last)
        y = torch.randint(0, 100, (x.shape[0],), device=dev)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
else:
    sys.exit(f"unknown workload {kind}")

# A probe: bytes per entry and entries per step of this loop, from a small dump.
torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
for i in range(3):
    step(i)
torch.cuda.synchronize()
mark = len(torch.cuda.memory._snapshot()["device_traces"][0])
probe_steps = 30
for i in range(3, 3 + probe_steps):
    step(i)
torch.cuda.synchronize()
probe = path + ".probe"
torch.cuda.memory._dump_snapshot(probe)
entries = len(torch.cuda.memory._snapshot()["device_traces"][0])
per_step = (entries - mark) / probe_steps
per_entry = os.path.getsize(probe) / entries
os.remove(probe)
torch.cuda.memory._record_memory_history(enabled=None)

# The recording: the ring buffer sized for the target, and wrapped.
max_entries = int(target_bytes / per_entry)
steps = int(max_entries / per_step * 1.1) + 10
torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks="python")
t = time.perf_counter()
for i in range(steps):
    step(i)
torch.cuda.synchronize()
recorded_s = time.perf_counter() - t
t = time.perf_counter()
torch.cuda.memory._dump_snapshot(path)
dumped_s = time.perf_counter() - t
stats = torch.cuda.memory_stats()
print(json.dumps(dict(kind=kind, torch=torch.__version__, device=torch.cuda.get_device_name(),
    probe_bytes_per_entry=per_entry, probe_entries_per_step=per_step, max_entries=max_entries,
    steps=steps, recorded_s=recorded_s, dumped_s=dumped_s, file_bytes=os.path.getsize(path),
    memory_stats={k: v for k, v in stats.items() if k.endswith((".all.current", ".all.peak", "num_alloc_retries", "num_ooms"))})))
'''


def compress_piece(args):
    path, offset, n = args
    with open(path, "rb") as f:
        f.seek(offset)
        return lzma.compress(f.read(n), preset=6)


def compress(path, name):
    """xz of `path` in pieces on every core, cut into parts under OUT."""
    size = os.path.getsize(path)
    pieces = [(path, o, min(PIECE_BYTES, size - o)) for o in range(0, size, PIECE_BYTES)]
    with ProcessPoolExecutor(os.cpu_count()) as pool:
        data = b"".join(pool.map(compress_piece, pieces))
    parts = []
    for k in range(0, len(data), PART_BYTES):
        part = f"{OUT}/{name}.pickle.xz.part{k // PART_BYTES:02d}"
        with open(part, "wb") as g:
            g.write(data[k:k + PART_BYTES])
        parts.append(os.path.basename(part))
    return len(data), parts


def main():
    os.makedirs(WORK, exist_ok=True)
    # Name, workload, target bytes: in order of what matters most if time runs out.
    plan = [("real_bert_164m", "bert", 164_000_000), ("real_resnet_164m", "resnet", 164_000_000),
            ("real_resnet_1g", "resnet", 1_050_000_000)]
    # PLAN=NAME,NAME: only those (the three do not fit in one 10-minute device call).
    if os.environ.get("PLAN"):
        plan = [p for p in plan if p[0] in os.environ["PLAN"].split(",")]
    results = []
    for name, kind, target in plan:
        path = f"{WORK}/{name}.pickle"
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", CHILD, kind, path, str(target)], capture_output=True, text=True)
        if r.returncode != 0:
            print(name, "failed", r.returncode, r.stderr[-3000:], flush=True)
            continue
        info = json.loads(r.stdout.strip().splitlines()[-1])
        info["name"], info["child_s"] = name, time.perf_counter() - t
        t = time.perf_counter()
        info["xz_bytes"], info["parts"] = compress(path, name)
        info["xz_s"] = time.perf_counter() - t
        print(json.dumps(info), flush=True)
        results.append(info)
        with open(f"{OUT}/record_real.json", "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
