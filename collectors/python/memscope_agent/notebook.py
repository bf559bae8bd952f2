"""Notebooks and scripts: ``memscope_agent.record()`` records a block's allocation history and
dumps it as a snapshot (on exit, or on the out-of-memory error that ends it, on every rank, named
and tagged with job and rank), says when the dump holds no history (the usual "why is my pickle
empty"), uploads it when a server is set, and shows its report inline in Jupyter (the HTML that
``memscope report`` writes, in an isolated frame). ``memscope_agent.show(path)`` shows any
snapshot's report.

    with memscope_agent.record() as rec:
        train(model, loader)
    rec            # in Jupyter: the report; elsewhere: rec.path

The report needs the ``memscope`` command (``pip install memscope-gpu``, or ``MEMSCOPE_BIN``);
recording and dumping need only torch.
"""

import contextlib
import html
import os
import shutil
import subprocess
import time
import warnings

from . import Agent, Settings, log

__all__ = ["record", "show", "Recording", "Report"]


class Report:
    """A snapshot's report to show: ``_repr_html_`` is the self-contained HTML report in a frame
    of its own (its styles and script touch nothing else in the notebook)."""

    def __init__(self, path):
        self.path = path

    def html(self):
        """The report's HTML file, as text (``memscope report --format html``)."""
        return _memscope_report(self.path, "html")

    def markdown(self):
        """The report as Markdown (``memscope report --format md``)."""
        return _memscope_report(self.path, "md")

    def _repr_html_(self):
        try:
            page = self.html()
        except Exception as e:  # shown, not raised: a notebook cell keeps working
            return "<p><b>memscope</b>: no report for %s: %s</p>" % (html.escape(str(self.path)), html.escape(str(e)))
        return ('<iframe class="memscope-report-frame" style="width:100%%;height:900px;border:0" '
                'srcdoc="%s"></iframe>' % html.escape(page, quote=True))

    def __repr__(self):
        return "memscope report of %s" % self.path


def show(path):
    """The report of the snapshot at ``path``, to display (Jupyter shows it inline)."""
    return Report(path)


class Recording(Report):
    """What ``record()`` made: the snapshot's ``path`` (set when the block ends), whether an
    out-of-memory error ended it (``oom``), the trace entries it holds (``events``), and its id on
    the server when it was uploaded (``snapshot_id``)."""

    def __init__(self, job, rank):
        super().__init__(None)
        self.job, self.rank = job, rank
        self.oom = False
        self.events = None
        self.snapshot_id = None

    def _repr_html_(self):
        if self.path is None:
            return "<p><b>memscope</b>: recording (the snapshot is written when the block ends)</p>"
        return super()._repr_html_()

    def __repr__(self):
        return "memscope recording: %s" % (self.path or "in progress")


def _memscope_report(path, fmt):
    exe = os.environ.get("MEMSCOPE_BIN") or shutil.which("memscope")
    if not exe:
        raise RuntimeError("the memscope command is not installed: pip install memscope-gpu (or set MEMSCOPE_BIN)")
    out = subprocess.run([exe, "report", "--format", fmt, str(path)], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip() or "memscope report failed")
    return out.stdout


def _rank(torch):
    """This process's rank: torch.distributed's when it is initialised, else RANK, else None."""
    dist = getattr(torch, "distributed", None)
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    r = os.environ.get("MEMSCOPE_RANK", os.environ.get("RANK"))
    return int(r) if r is not None and r.strip().isdigit() else None


def _is_oom(torch, e):
    oom = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    if oom is not None and isinstance(e, oom):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()


@contextlib.contextmanager
def record(path=None, *, job=None, rank=None, max_entries=100_000, stacks="python", server=None,
           upload=None, torch_module=None):
    """Records the allocation history of the block and dumps it as a snapshot when the block
    ends, also when an out-of-memory error ends it (the error is raised on). ``path``: the file
    (default ``memscope-{job}-rank{N}-{time}.pickle`` in the working folder, ``-oom`` when an
    OOM ended the block; ``{rank}`` in a given path is replaced). ``job``/``rank`` tag it
    (defaults: ``MEMSCOPE_JOB``; torch.distributed's rank, else ``RANK``). With a server
    (``server=`` or ``MEMSCOPE_SERVER``) it is uploaded there, tagged ``job=…,rank=…``, unless
    ``upload=False``. Yields a ``Recording``; in Jupyter it displays as the snapshot's report."""
    if torch_module is None:
        import torch as torch_module
    torch = torch_module
    job = job or os.environ.get("MEMSCOPE_JOB")
    rank = rank if rank is not None else _rank(torch)
    rec = Recording(job, rank)
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks=stacks, max_entries=max_entries)
    try:
        yield rec
    except BaseException as e:
        rec.oom = _is_oom(torch, e)
        _finish(torch, rec, path, server, upload)
        raise
    else:
        _finish(torch, rec, path, server, upload)


def _finish(torch, rec, path, server, upload):
    """Dumps the snapshot, stops recording, warns when it holds no history, uploads it."""
    if path is None:
        parts = ["memscope", rec.job or "run"]
        if rec.rank is not None:
            parts.append("rank%d" % rec.rank)
        parts.append(time.strftime("%Y%m%d-%H%M%S"))
        if rec.oom:
            parts.append("oom")
        path = "-".join(parts) + ".pickle"
    else:
        path = str(path).replace("{rank}", str(rec.rank if rec.rank is not None else 0))
    try:
        snap = torch.cuda.memory._snapshot()
        rec.events = sum(len(t) for t in snap.get("device_traces", []))
    except Exception:
        rec.events = None
    torch.cuda.memory._dump_snapshot(path)
    rec.path = path
    try:
        torch.cuda.memory._record_memory_history(enabled=None)
    except Exception as e:
        log.warning("memscope: could not stop recording history: %s", e)
    if rec.events == 0:
        warnings.warn(
            "memscope: %s holds no allocation history (no trace entries), only the allocator's "
            "state at the end. The block must allocate on the GPU while it records: wrap the "
            "training loop itself, not code that only moves data; history is per process (each "
            "rank records its own); recording needs PyTorch 2.1 or newer." % path,
            stacklevel=4)
    settings = Settings(server=server, job=rec.job, rank=rec.rank)
    if settings.server and upload is not False:
        tags = {"kind": "oom" if rec.oom else "recorded"}
        name = os.path.basename(path)
        try:
            rec.snapshot_id = Agent(settings, torch).upload(path, name, tags)
        except Exception as e:
            log.warning("memscope: could not upload %s: %s", path, e)
