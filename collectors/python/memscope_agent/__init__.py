"""memscope's in-process PyTorch agent.

The caching allocator cannot be read from outside the training process, so this small module runs
inside it: ``import memscope_agent; memscope_agent.start()``. A daemon thread samples
``torch.cuda.memory_stats()`` of every device the process uses (~80 us each), summarises a cheap
segment-only snapshot now and then (segments, largest free block), and ships both either to the
host's ``memscope-collector`` (a folder it watches, ``MEMSCOPE_AGENT_DIR``; the collector joins the
samples to NVML's per-process readings and spools them without loss) or straight to a memscope
server (``MEMSCOPE_SERVER`` + ``MEMSCOPE_TOKEN``). On an out-of-memory error it dumps a snapshot
(once per incident) and uploads it to the server, tagged with host, process, job and rank.
``memscope_agent.step(n)`` marks training steps so series can be read per step.
``with memscope_agent.record(): ...`` records a block's allocation history and dumps it as a
snapshot (also on the OOM that ends it), shown inline in Jupyter as memscope's report
(``notebook.py``).

It must never crash or slow the training process: every entry point swallows its own errors and
logs each kind of failure once (logger ``memscope_agent``); nothing here runs on the training
thread except ``step()`` (a sample at most once per interval) and the OOM observer.

It needs nothing beyond torch and the standard library.
"""

import atexit
import gzip
import json
import logging
import os
import random
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["start", "stop", "step", "snapshot", "record", "show", "Agent", "Settings"]
__version__ = "0.1.0"

WIRE_VERSION = 1
log = logging.getLogger("memscope_agent")


def _env(name, default=None):
    v = os.environ.get(name)
    return v if v not in (None, "") else default


def _env_bool(name, default):
    v = _env(name)
    if v is None:
        return default
    return v.strip().lower() not in ("0", "false", "no", "off")


def _now_ms():
    return int(time.time() * 1000)


def _human(n):
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%.0f %s" if unit == "B" else "%.2f %s") % (n, unit)
        n /= 1024


def process_start_ms(pid="self"):
    """The process's start time in ms since the epoch, computed exactly as the collector does
    (boot time + start ticks), so (host, pid, start) names the same process on both sides."""
    with open("/proc/%s/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    start_ticks = int(fields[19])
    with open("/proc/stat") as f:
        btime = next(int(l.split()[1]) for l in f if l.startswith("btime "))
    return btime * 1000 + start_ticks * 1000 // os.sysconf("SC_CLK_TCK")


class Settings:
    """What the agent does; every field can come from a ``MEMSCOPE_*`` variable."""

    def __init__(self, server=None, token=None, name=None, agent_dir=None, interval_s=None,
                 segments_interval_s=None, record_history=None, max_entries=None,
                 oom_snapshots=None, snapshot_dir=None, job=None, rank=None, tags=None, api_token=None):
        self.server = (server or _env("MEMSCOPE_SERVER") or "").rstrip("/") or None
        self.token = token or _env("MEMSCOPE_TOKEN") or _env("MEMSCOPE_COLLECTOR_TOKEN")
        # A write token for snapshot uploads, where the server requires one (--api-token).
        self.api_token = api_token or _env("MEMSCOPE_API_TOKEN")
        self.name = name or _env("MEMSCOPE_NAME") or _env("MEMSCOPE_COLLECTOR_NAME") or socket.gethostname()
        self.agent_dir = agent_dir or _env("MEMSCOPE_AGENT_DIR")
        self.interval_s = float(interval_s if interval_s is not None else _env("MEMSCOPE_INTERVAL_S", 1.0))
        self.segments_interval_s = float(segments_interval_s if segments_interval_s is not None
                                         else _env("MEMSCOPE_SEGMENTS_INTERVAL_S", 10.0))
        self.record_history = (record_history if record_history is not None
                               else _env_bool("MEMSCOPE_RECORD_HISTORY", False))
        self.max_entries = int(max_entries if max_entries is not None else _env("MEMSCOPE_MAX_ENTRIES", 100000))
        self.oom_snapshots = (oom_snapshots if oom_snapshots is not None
                              else _env_bool("MEMSCOPE_OOM_SNAPSHOT", True))
        self.snapshot_dir = snapshot_dir or _env("MEMSCOPE_SNAPSHOT_DIR") or tempfile.gettempdir()
        # Keep OOM dumps on disk after uploading them (the harness turns them into fixtures).
        self.keep_snapshots = _env_bool("MEMSCOPE_KEEP_SNAPSHOTS", False)
        self.job = job or _env("MEMSCOPE_JOB")
        self.rank = rank if rank is not None else _env("MEMSCOPE_RANK", _env("RANK"))
        # Extra tags on every snapshot this process uploads: a dict, or "k=v,k2=v2".
        tags = tags if tags is not None else _env("MEMSCOPE_TAGS", "")
        if isinstance(tags, str):
            tags = dict(t.split("=", 1) if "=" in t else ("", t) for t in tags.split(",") if t.strip())
        self.tags = {k.strip(): str(v).strip() for k, v in tags.items()}
        # Where live statistics go: the collector's folder, else the server, else the default folder.
        if self.agent_dir:
            self.mode = "relay"
        elif self.server and self.token:
            self.mode = "direct"
        else:
            self.mode = "relay"
            self.agent_dir = "/tmp/memscope-agent"


class Agent:
    """One per process (``start()`` returns the running one)."""

    # Unsent batches/files kept while the server or collector is away; older ones are dropped
    # (and counted) beyond this.
    MAX_BACKLOG = 3600
    # OOM observer calls closer than this belong to one incident (cuDNN retries fire several).
    INCIDENT_GAP_S = 10.0

    def __init__(self, settings, torch_module=None):
        if torch_module is None:
            import torch as torch_module  # the training process has it; tests pass a stand-in
        self.torch = torch_module
        self.s = settings
        self.host = socket.gethostname()
        self.pid = os.getpid()
        try:
            self.start_ms = process_start_ms()
        except Exception:
            self.start_ms = None
        self._lock = threading.Lock()
        self._alloc = []
        self._events = []
        self._dropped = 0
        self._step = None
        self._last_sample = 0.0
        self._segments = {}
        self._uuids = {}
        self._retries = {}
        self._logged = set()
        self._stop = threading.Event()
        self._thread = None
        self._uploads = []
        self._last_incident = -1e9
        self._seq = 0
        self._backlog = []  # direct mode: batches not yet acknowledged
        self._files = 0
        self._retry_at = 0.0
        self._attempt = 0
        self.collector = "%s/%s:%d:%s" % (self.s.name, self.host, self.pid, self.start_ms or 0)

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self):
        if self.s.record_history:
            self._guard("record_history", self._record_history)
        if self.s.oom_snapshots:
            self._guard("oom_observer", self._attach_oom_observer)
        self._thread = threading.Thread(target=self._run, name="memscope-agent", daemon=True)
        self._thread.start()
        where = self.s.agent_dir if self.s.mode == "relay" else self.s.server
        log.info("memscope agent: sampling every %.3gs, sending to %s (%s)", self.s.interval_s, where, self.s.mode)
        return self

    def stop(self, timeout_s=30.0):
        """Stops sampling, waits for OOM uploads in flight and sends what is buffered."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        deadline = time.monotonic() + timeout_s
        for t in list(self._uploads):
            t.join(max(0.0, deadline - time.monotonic()))
        self._guard("sample", self.sample)
        self._guard("flush", self.flush, final=True)

    def _run(self):
        next_segments = time.monotonic()
        while not self._stop.wait(self.s.interval_s):
            now = time.monotonic()
            if now - self._last_sample >= self.s.interval_s * 0.9:
                self._guard("sample", self.sample)
            # A segment snapshot needs PyTorch to symbolise the recorded stacks when history is
            # on: the first one imports ~900 modules (6 s on an H100 host) and, from this
            # thread, can race the training thread's own imports (seen: a circular-import error
            # in torch.optim). So with history on, segments come from memory_stats only.
            if self.s.segments_interval_s > 0 and not self.s.record_history and now >= next_segments:
                self._guard("segments", self._summarise_segments)
                next_segments = now + self.s.segments_interval_s
            self._guard("flush", self.flush)

    # ---- errors --------------------------------------------------------------------------

    def _log_once(self, key, msg, *args):
        if key not in self._logged:
            self._logged.add(key)
            log.warning("memscope agent: " + msg + " (logged once)", *args)

    def _guard(self, key, fn, *a, **kw):
        try:
            return fn(*a, **kw)
        except Exception as e:  # never let the agent break training
            # Once per distinct failure, whichever path met it (step() and the sampler share one).
            self._log_once("%s: %s" % (type(e).__name__, e), "%s failed: %s: %s", key, type(e).__name__, e)
            return None

    # ---- sampling ------------------------------------------------------------------------

    def _cuda_ready(self):
        cuda = self.torch.cuda
        return cuda.is_available() and cuda.is_initialized()

    def _gpu_uuid(self, device):
        if device not in self._uuids:
            u = None
            try:
                u = str(self.torch.cuda.get_device_properties(device).uuid)
                if not u.startswith(("GPU-", "MIG-")):
                    u = "GPU-" + u
            except Exception:
                pass
            self._uuids[device] = u
        return self._uuids[device]

    def sample(self):
        """Reads memory_stats() of every device this process has used; returns the samples."""
        if not self._cuda_ready():
            return []
        self._last_sample = time.monotonic()
        t = _now_ms()
        out = []
        for d in range(self.torch.cuda.device_count()):
            st = self.torch.cuda.memory_stats(d)
            if not st or not st.get("reserved_bytes.all.peak"):
                continue  # a device this process never allocated on
            seg = self._segments.get(d, (st.get("segment.all.current"), None))
            retries = int(st.get("num_alloc_retries", 0))
            if retries > self._retries.get(d, 0):
                # cudaMalloc failed, the cache was flushed and the call retried: the early warning.
                new = retries - self._retries.get(d, 0)
                self._event("alloc_retry", t, d, "%d allocation %s on device %d (%d new): cudaMalloc failed, "
                            "PyTorch freed its cache and retried" % (retries, "retry" if retries == 1 else "retries", d, new))
            self._retries[d] = retries
            out.append({
                "time_ms": t,
                "pid": self.pid,
                "start_time_ms": self.start_ms,
                "device": d,
                "gpu_uuid": self._gpu_uuid(d),
                "step": self._step,
                "allocated_bytes": int(st.get("allocated_bytes.all.current", 0)),
                "reserved_bytes": int(st.get("reserved_bytes.all.current", 0)),
                "active_bytes": st.get("active_bytes.all.current"),
                "inactive_split_bytes": st.get("inactive_split_bytes.all.current"),
                "requested_bytes": st.get("requested_bytes.all.current"),
                "alloc_retries": st.get("num_alloc_retries"),
                "ooms": st.get("num_ooms"),
                "segments": seg[0],
                "largest_free_block_bytes": seg[1],
            })
        with self._lock:
            self._alloc.extend(out)
            excess = len(self._alloc) - 100000
            if excess > 0:
                del self._alloc[:excess]
                self._dropped += excess
        return out

    def _summarise_segments(self):
        """Segments and the largest free block per device, from a segment-only snapshot."""
        if not self._cuda_ready():
            return
        mem = self.torch.cuda.memory
        try:
            segs = mem.memory_snapshot(include_traces=False)
        except TypeError:  # before include_traces existed
            segs = mem.memory_snapshot()
        per = {}
        for seg in segs:
            d = seg.get("device", 0)
            n, largest = per.get(d, (0, 0))
            for b in seg.get("blocks", ()):
                if b.get("state") == "inactive":
                    largest = max(largest, int(b.get("size", 0)))
            per[d] = (n + 1, largest)
        self._segments = per

    def set_step(self, n):
        self._step = (self._step or 0) + 1 if n is None else int(n)
        # A sample at the step boundary, at most once per interval, so per-step series line up.
        if time.monotonic() - self._last_sample >= self.s.interval_s:
            self.sample()

    def _record_history(self):
        self.torch.cuda.memory._record_memory_history(
            enabled="all", context="all", stacks="python", max_entries=self.s.max_entries)

    # ---- OOM -----------------------------------------------------------------------------

    def _attach_oom_observer(self):
        self.torch._C._cuda_attach_out_of_memory_observer(self._on_oom)

    def _on_oom(self, device, requested_bytes, limit_bytes, free_bytes):
        # PyTorch calls this with (device, bytes requested, the most this process may use: the
        # device's total or its set_per_process_memory_fraction share, bytes free on the device).
        try:
            now = time.monotonic()
            if now - self._last_incident < self.INCIDENT_GAP_S:
                return  # the same incident (retries fire the observer again)
            self._last_incident = now
            t = _now_ms()
            message = "out of memory on device %d: requested %d bytes (%s); the process may use %s; %s free on the device" % (
                device, requested_bytes, _human(requested_bytes), _human(limit_bytes), _human(free_bytes))
            path = os.path.join(self.s.snapshot_dir, "memscope-oom-%s-%d-%d.pickle" % (self.host, self.pid, t))
            self.torch.cuda.memory._dump_snapshot(path)
            tags = {"kind": "oom", "host": self.host, "pid": str(self.pid), "device": str(device)}
            th = threading.Thread(target=self._upload_oom, args=(path, t, device, message, tags),
                                  name="memscope-oom-upload", daemon=True)
            self._uploads.append(th)
            th.start()
        except Exception as e:
            self._log_once("oom", "could not record the OOM: %s: %s", type(e).__name__, e)

    def _upload_oom(self, path, t, device, message, tags):
        snapshot_id = None
        if self.s.server:
            snapshot_id = self._guard("upload", self.upload, path, "oom %s pid %d" % (self.host, self.pid), tags,
                                      device)
        if snapshot_id and not self.s.keep_snapshots:
            try:
                os.remove(path)
            except OSError:
                pass
        else:
            message += "; snapshot kept at %s" % path
        self._event("oom", t, device, message, snapshot_id)

    def _event(self, kind, t, device, message, snapshot_id=None):
        with self._lock:
            self._events.append({"time_ms": t, "kind": kind, "pid": self.pid, "device": device,
                                 "message": message, "snapshot_id": snapshot_id})

    def _tags(self, extra):
        tags = dict(self.s.tags)
        tags.update(extra)
        if self.s.job:
            tags["job"] = self.s.job
        if self.s.rank is not None:
            tags["rank"] = str(self.s.rank)
        return ",".join("%s=%s" % (k, str(v).replace(",", " ")) for k, v in tags.items())

    def _device_total(self, device):
        """The device's total memory: the server's OOM verdicts need it (a snapshot lacks it)."""
        try:
            cuda = self.torch.cuda
            d = cuda.current_device() if device is None else device
            return int(cuda.get_device_properties(d).total_memory)
        except Exception:
            return None

    def upload(self, path, name, tags, device=None, attempts=5):
        """Uploads a snapshot file to the server, with the device's total memory; returns its id.
        A busy server (503: the memory or slots it parses with are in use) is asked again after
        the time it names in Retry-After (at most 30 s); an unreachable one after a backoff."""
        params = {"name": name, "tags": self._tags(tags)}
        total = self._device_total(device)
        if total:
            params["device_total_bytes"] = str(total)
        query = urllib.parse.urlencode(params)
        last = None
        for i in range(attempts):
            try:
                with open(path, "rb") as f:
                    headers = {"content-type": "application/octet-stream",
                               "content-length": str(os.path.getsize(path))}
                    if self.s.api_token:
                        headers["authorization"] = "Bearer " + self.s.api_token
                    req = urllib.request.Request(
                        "%s/api/snapshots?%s" % (self.s.server, query), data=f, method="POST",
                        headers=headers)
                    with urllib.request.urlopen(req, timeout=300) as r:
                        return json.loads(r.read())["id"]
            except urllib.error.HTTPError as e:
                if e.code in (429, 503) and i + 1 < attempts:
                    retry_after = (e.headers.get("retry-after") or "").strip()
                    delay = float(retry_after) if retry_after.isdigit() else 0.5 * 2 ** i
                    last = "busy (%d)" % e.code
                    time.sleep(min(30.0, delay))
                    continue
                raise RuntimeError("server refused the snapshot (%d): %s" % (e.code, e.read()[:300]))
            except Exception as e:
                last = e
                time.sleep(min(10.0, 0.5 * 2 ** i))
        raise RuntimeError("server unreachable: %s" % last)

    def snapshot(self, name=None, tags=None):
        """Dumps a snapshot now (segments, and the trace if history is recorded) and uploads it;
        returns the snapshot's id on the server, or the file's path when no server is set."""
        t = _now_ms()
        path = os.path.join(self.s.snapshot_dir, "memscope-%s-%d-%d.pickle" % (self.host, self.pid, t))
        self.torch.cuda.memory._dump_snapshot(path)
        if not self.s.server:
            return path
        all_tags = {"kind": "on-request", "host": self.host, "pid": str(self.pid)}
        all_tags.update(tags or {})
        sid = self.upload(path, name or "snapshot %s pid %d" % (self.host, self.pid), all_tags)
        os.remove(path)
        return sid

    # ---- shipping ------------------------------------------------------------------------

    def flush(self, final=False):
        with self._lock:
            alloc, events, dropped = self._alloc, self._events, self._dropped
            self._alloc, self._events, self._dropped = [], [], 0
        if alloc or events or dropped:
            if self.s.mode == "relay":
                self._write_file(alloc, events, dropped)
            else:
                self._seq += 1
                self._backlog.append({
                    "version": WIRE_VERSION, "collector": self.collector, "seq": self._seq,
                    # The server keeps a token's batches as host NAME (the token's name).
                    "host": self.s.name, "allocator": alloc, "events": events, "dropped_samples": dropped})
                if len(self._backlog) > self.MAX_BACKLOG:
                    lost = self._backlog.pop(0)
                    with self._lock:
                        self._dropped += len(lost["allocator"])
        if self.s.mode == "direct":
            self._send_backlog(final)

    def _write_file(self, alloc, events, dropped):
        d = self.s.agent_dir
        os.makedirs(d, exist_ok=True)
        self._files += 1
        if self._files % 60 == 1:
            mine = "%d-%s-" % (self.pid, self.start_ms)
            waiting = sum(1 for n in os.listdir(d) if n.startswith(mine))
            if waiting > self.MAX_BACKLOG:
                # No collector is reading the folder: do not fill the disk.
                self._log_once("relay", "%d files wait in %s: is memscope-collector running with --agent-dir?",
                               waiting, d)
                with self._lock:
                    self._dropped += len(alloc) + dropped
                return
        body = {"version": WIRE_VERSION, "pid": self.pid, "start_time_ms": self.start_ms,
                "allocator": alloc, "events": events, "dropped_samples": dropped}
        base = os.path.join(d, "%d-%s-%09d" % (self.pid, self.start_ms, self._files))
        with open(base + ".tmp", "w") as f:
            json.dump(body, f)
        os.replace(base + ".tmp", base + ".json")

    def _send_backlog(self, final):
        if not final and time.monotonic() < self._retry_at:
            return
        while self._backlog:
            batch = self._backlog[-1]  # fresh data ahead of the backlog
            try:
                self._post(batch)
            except urllib.error.HTTPError as e:
                if e.code in (429,) or e.code >= 500:
                    self._backoff("server answered %d" % e.code)
                    return
                # Refused (bad token, malformed): resending cannot help; keep it out of the way.
                self._log_once("refused", "server refused a batch (%d): %s", e.code, e.read()[:300])
                self._backlog.pop()
                continue
            except Exception as e:
                self._backoff(e)
                return
            self._backlog.pop()
            self._attempt = 0

    def _backoff(self, why):
        self._log_once("send", "cannot reach %s (%s); keeping samples until it is back", self.s.server, why)
        delay = min(30.0, 0.5 * 2 ** min(self._attempt, 6)) * random.uniform(0.75, 1.25)
        self._attempt += 1
        self._retry_at = time.monotonic() + delay

    def _post(self, batch):
        body = gzip.compress(json.dumps(batch).encode(), 1)
        req = urllib.request.Request(
            self.s.server + "/api/ingest", data=body, method="POST",
            headers={"content-type": "application/json", "content-encoding": "gzip",
                     "authorization": "Bearer " + self.s.token})
        with urllib.request.urlopen(req, timeout=10) as r:
            ack = json.loads(r.read())
        if ack.get("seq") != batch["seq"]:
            raise RuntimeError("server acknowledged seq %s for batch %s" % (ack.get("seq"), batch["seq"]))


_agent = None
_agent_lock = threading.Lock()


def _forget_in_child():
    # A forked child (a DataLoader worker) inherits the module but not the sampling thread, and
    # must not touch CUDA or resend the parent's buffers: it has no agent.
    global _agent
    _agent = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def start(**kwargs):
    """Starts the agent once per process (later calls return the running one). Keyword
    arguments are the fields of ``Settings``; unset ones come from ``MEMSCOPE_*`` variables.
    Returns the agent, or None if it could not start (the reason is logged)."""
    global _agent
    with _agent_lock:
        if _agent is not None:
            return _agent
        try:
            _agent = Agent(Settings(**kwargs)).start()
            atexit.register(stop)
        except Exception as e:
            log.warning("memscope agent: not started: %s: %s", type(e).__name__, e)
            _agent = None
        return _agent


def stop():
    """Stops the agent, sending what it holds (also runs at interpreter exit)."""
    global _agent
    with _agent_lock:
        a, _agent = _agent, None
    if a is not None:
        try:
            a.stop()
        except Exception as e:
            log.warning("memscope agent: stop failed: %s", e)


def step(n=None):
    """Marks the start of training step ``n`` (default: the previous step + 1)."""
    a = _agent
    if a is not None:
        a._guard("step", a.set_step, n)


def snapshot(name=None, **tags):
    """Dumps and uploads a snapshot now; returns its id (or the file's path without a server)."""
    a = _agent
    if a is None:
        return None
    return a._guard("snapshot", a.snapshot, name, tags)


# Notebooks and scripts: record a block, dump it (also on OOM), show its report inline.
from .notebook import Recording, Report, record, show  # noqa: E402
