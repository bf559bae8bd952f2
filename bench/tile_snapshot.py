"""Make a GB-scale snapshot from a real one by tiling it in time and address space (issue 14).

Why this exists: memscope's speed and memory targets are set on a 1 GB, 12M-event snapshot, and a
GPU run that records 12M events with C++ stacks takes longer to record and dump than a benchmark
should. Tiling a recorded run gives the same shape at any size: copy k of the run's trace runs
after copy k-1 (times shifted by the run's span plus a second) at its own addresses (shifted by a
stride larger than the run's whole address range, so copies never overlap), and the final
segments are every copy's own final segments, shifted the same way. Each copy is therefore
consistent with its own segments, exactly as the original is with its: replaying the tiled trace
gives each copy's memory on top of the copies before it (a run that never frees the previous
copies' segments: reserved memory steps up by the run's reserved memory per copy).

Entries share their frame lists with the original's (the pickle writes a list once and refers to
it after), as PyTorch shares frame dicts: a copy costs ~80 bytes per event, so 12 copies of the
1M-event, 167 MB `big_cpp.pickle` make a 1.0 GB file. With `--fresh-lists` every copy's entries
have lists and strings of their own, as `torch.cuda.memory._snapshot()` makes them (a new frames
list of references to the shared frame dicts, a new `"N/A"` string per entry): the pickle then
writes them out for every entry, as in a snapshot PyTorch wrote.

    python3 bench/tile_snapshot.py IN.pickle OUT.pickle --copies 12 [--fresh-lists]

The input is our own recording (bench/make_big_snapshot.py), so it is loaded with Python's
pickle: never run this on a file you did not make.
"""
import argparse, copy, os, pickle, sys, time

GiB = 1 << 30


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--copies", type=int, default=12)
    ap.add_argument("--fresh-lists", action="store_true",
                    help="new frames lists and strings in every copy's entries, as PyTorch writes them")
    a = ap.parse_args()
    t0 = time.time()
    with open(a.input, "rb") as f:
        snap = pickle.load(f)
    traces = snap["device_traces"]
    addrs = [s["address"] for s in snap["segments"]]
    ends = [s["address"] + s["total_size"] for s in snap["segments"]]
    for t in traces:
        addrs += [e["addr"] for e in t]
    lo, hi = min(addrs), max(ends + addrs)
    # Whole GiBs beyond the run's address range: copies never overlap and stay 2 MiB aligned.
    stride = ((hi - lo) // GiB + 1) * GiB
    times = [e["time_us"] for t in traces for e in t if e.get("time_us")]
    span_us = (max(times) - min(times) + 1_000_000) if times else 0
    print(f"read {a.input} in {time.time() - t0:.1f} s: {sum(map(len, traces)):,} events, "
          f"address stride {stride / GiB:.0f} GiB, time stride {span_us / 1e6:.1f} s", file=sys.stderr)

    def fresh(v):
        """A new object equal to `v` (lists and strings), so the pickle writes it again."""
        if isinstance(v, list):
            return list(v)
        if isinstance(v, str):
            return "".join(list(v))
        return v

    def shifted_entry(e, k):
        # frames: the same list object, written once (unless --fresh-lists)
        # (PyTorch shares the action names; a copy's are the original's.)
        c = dict(e)
        if a.fresh_lists:
            c.update((key, fresh(v)) for key, v in e.items() if key != "action")
        c["addr"] = e["addr"] + k * stride
        if "time_us" in e:
            c["time_us"] = e["time_us"] + k * span_us
        return c

    def shifted_segment(s, k):
        c = dict(s)
        c["address"] = s["address"] + k * stride
        c["blocks"] = []
        for b in s.get("blocks", []):
            nb = dict(b)
            nb["address"] = b["address"] + k * stride
            c["blocks"].append(nb)
        return c

    out = dict(snap)
    out["segments"] = [shifted_segment(s, k) for k in range(a.copies) for s in snap["segments"]]
    out["device_traces"] = [
        [shifted_entry(e, k) if k or a.fresh_lists else e for k in range(a.copies) for e in t]
        for t in traces
    ]
    if snap.get("external_annotations"):
        out["external_annotations"] = [
            dict(x, time_us=x["time_us"] + k * span_us) if "time_us" in x and k else x
            for k in range(a.copies)
            for x in snap["external_annotations"]
        ]
    tmp = a.output + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(out, f, protocol=4)
    os.replace(tmp, a.output)
    print(f"wrote {a.output}: {os.path.getsize(a.output):,} bytes, "
          f"{sum(map(len, out['device_traces'])):,} events, {len(out['segments'])} segments "
          f"in {time.time() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
