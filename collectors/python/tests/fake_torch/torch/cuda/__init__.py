import types

from . import memory  # noqa: F401


class _Fake:
    def __init__(self):
        self.devices = 1
        self.initialized = True
        self.allocated = {0: 512 << 20}
        self.reserved = {0: 1 << 30}
        self.retries = 0
        self.ooms = 0
        self.observers = []
        self.fail_stats = False
        self.history = None
        self.dumps = []
        self.snapshots_taken = 0
        self.total_memory = 150_754_820_096  # an H200

    def fire_oom(self, device=0, requested=24 << 20, limit=1 << 31, free=8 << 20):
        self.ooms += 1
        for cb in self.observers:
            cb(device, requested, limit, free)


fake = _Fake()


def is_available():
    return True


def is_initialized():
    return fake.initialized


def device_count():
    return fake.devices


def memory_stats(device=None):
    if fake.fail_stats:
        raise RuntimeError("memory_stats broke")
    d = device or 0
    if d not in fake.reserved:
        return {}
    a, r = fake.allocated[d], fake.reserved[d]
    return {
        "allocated_bytes.all.current": a,
        "reserved_bytes.all.current": r,
        "reserved_bytes.all.peak": r,
        "active_bytes.all.current": a,
        "inactive_split_bytes.all.current": (r - a) // 4,
        "requested_bytes.all.current": a - 1000,
        "num_alloc_retries": fake.retries,
        "num_ooms": fake.ooms,
        "segment.all.current": 2,
    }


def get_device_properties(device):
    return types.SimpleNamespace(uuid="0a1b2c3d-0000-1111-2222-33334444%04d" % device,
                                 total_memory=fake.total_memory)


def current_device():
    return 0
