import pickle


def _fake():
    from . import fake
    return fake


def memory_snapshot(include_traces=True):
    f = _fake()
    f.snapshots_taken += 1
    segs = []
    for d, r in f.reserved.items():
        a = f.allocated[d]
        segs.append({
            "device": d, "address": 0x7f0000000000 + d * (1 << 40), "total_size": r,
            "allocated_size": a, "active_size": a, "requested_size": a, "stream": 0,
            "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
            "blocks": [
                {"address": 0x7f0000000000 + d * (1 << 40), "size": a, "requested_size": a,
                 "state": "active_allocated", "frames": []},
                {"address": 0x7f0000000000 + d * (1 << 40) + a, "size": r - a, "requested_size": 0,
                 "state": "inactive", "frames": []},
            ],
        })
    return segs


def _snapshot(device=None):
    return {"segments": memory_snapshot(), "device_traces": [[] for _ in range(_fake().devices)]}


def _dump_snapshot(filename="dump_snapshot.pickle"):
    _fake().dumps.append(filename)
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


def _record_memory_history(enabled="all", **kwargs):
    _fake().history = dict(kwargs, enabled=enabled)
