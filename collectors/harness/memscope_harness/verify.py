"""Asks the server whether it found what each scenario planted: reads the scenarios' truth files,
the snapshot reports (``GET /api/snapshots/{id}``, the same object as ``memscope analyze --json``)
and the live API (``/api/live/*``), and returns one row per check.

Needs only the standard library (it also runs in CI, against the snapshots kept as fixtures,
with ``--fixtures``: live checks are then reported as skipped).
"""

import glob
import json
import os
import urllib.parse
import urllib.request

MIB = 1 << 20


class Server:
    def __init__(self, url):
        self.url = url.rstrip("/")

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=60) as r:
            return json.loads(r.read())

    def upload(self, path, name, tags, device_total_bytes=None):
        params = {"name": name, "tags": ",".join("%s=%s" % kv for kv in tags.items())}
        if device_total_bytes:
            params["device_total_bytes"] = str(device_total_bytes)
        q = urllib.parse.urlencode(params)
        with open(path, "rb") as f:
            req = urllib.request.Request("%s/api/snapshots?%s" % (self.url, q), data=f, method="POST",
                                         headers={"content-length": str(os.path.getsize(path))})
            with urllib.request.urlopen(req, timeout=300) as r:
                return json.loads(r.read())["id"]

    def find_snapshot(self, truth, kind):
        """The snapshot a scenario's process uploaded, by its tags."""
        q = urllib.parse.quote("scenario=%s" % truth["scenario"])
        for s in self.get("/api/snapshots?q=%s" % q):
            tags = {t["key"]: t["value"] for t in s["tags"]}
            if (tags.get("scenario") == truth["scenario"] and tags.get("kind") == kind
                    and tags.get("pid", str(truth["pid"])) == str(truth["pid"])):
                return s["id"]
        return None

    def process_page(self, truth):
        """The live process page of the scenario's process over its run (None if unknown)."""
        fleet = self.get("/api/live/fleet")
        host = next((p["host"] for p in fleet["processes"]
                     if p["pid"] == truth["pid"] and p.get("start_time_ms") in (None, truth["start_time_ms"])), None)
        if host is None:
            return None
        q = urllib.parse.urlencode({"from_ms": truth["started_ms"] - 5000, "to_ms": truth["finished_ms"] + 5000,
                                    "points": 2000, "start_time_ms": truth["start_time_ms"]})
        return self.get("/api/live/processes/%s/%d?%s" % (urllib.parse.quote(host), truth["pid"], q))


class Checks:
    def __init__(self, name):
        self.name, self.rows = name, []

    def check(self, what, expected, found, ok):
        self.rows.append({"scenario": self.name, "check": what, "expected": expected, "found": found,
                          "result": "pass" if ok else "FAIL"})

    def skip(self, what, expected, why):
        self.rows.append({"scenario": self.name, "check": what, "expected": expected, "found": why,
                          "result": "skip"})


def mib(n):
    return "%.1f MiB" % (n / MIB) if n is not None else "none"


def in_file(frame, truth):
    return os.path.basename(frame.get("filename", "")) == truth["file"]


def suspects_in_scenario(report, truth):
    return [s for s in report["leak_suspects"] if any(in_file(f, truth) for f in s["frames"])]


def live_leak(c, server, truth, live, expect_rising, per_step=None):
    if not live:
        c.skip("live leak signal", "rising" if expect_rising else "not rising", "live data not checked (--fixtures)")
        return
    page = server.process_page(truth)
    if page is None or not page["devices"]:
        c.check("live leak signal", "the process's live samples", "no live data for pid %d" % truth["pid"], False)
        return
    leak = page["devices"][0]["leak"]
    desc = "rising %s, %s/step over %d steps" % (leak["rising"], mib(leak["bytes_per_step"]), leak["steps"])
    if per_step is None:
        c.check("live leak signal", "not rising", desc, not leak["rising"])
    else:
        ok = leak["rising"] and abs(leak["bytes_per_step"] - per_step) <= 0.25 * per_step
        c.check("live leak signal", "rising, %s/step ±25%%" % mib(per_step), desc, ok)


def check_scenario(server, truth, reports, live):
    """Rows for one scenario. `reports`: kind → the analysis of its snapshot."""
    name = truth["scenario"]
    c = Checks(name + (".rank%s" % truth["expect"]["rank"] if name == "ranks" else ""))
    e = truth["expect"]
    rep = reports.get("harness")
    if name == "ranks" and e.get("oom"):
        rep = reports.get("oom")  # the failing rank's snapshot is the one dumped at its OOM
    if name != "oom_fragmentation" and rep is None:
        c.check("snapshot uploaded", "a snapshot tagged scenario=%s" % name, "none on the server", False)
        return c.rows
    if name == "steady":
        found = suspects_in_scenario(rep, truth)
        c.check("leak suspects", "none in %s" % truth["file"],
                ", ".join("%s:%d" % (os.path.basename(s["site"]["filename"]), s["site"]["line"]) for s in found) or "none",
                not found)
        live_leak(c, server, truth, live, False)
    elif name == "leak_list":
        top = rep["leak_suspects"][0] if rep["leak_suspects"] else None
        site = "%s:%d" % (os.path.basename(top["site"]["filename"]), top["site"]["line"]) if top else "none"
        c.check("top leak suspect", "%s:%d" % (truth["file"], e["line"]), site,
                top is not None and in_file(top["site"], truth) and top["site"]["line"] == e["line"])
        c.check("leaked bytes", mib(e["bytes"]) + " ±5%", mib(top["bytes"]) if top else "none",
                top is not None and abs(top["bytes"] - e["bytes"]) <= 0.05 * e["bytes"])
        live_leak(c, server, truth, live, True, e["bytes_per_step"])
    elif name == "leak_graph":
        found = [s for s in rep["leak_suspects"]
                 if any(in_file(f, truth) and f["line"] == e["cause_line"] for f in s["frames"])]
        c.check("leak suspect through the planted line", "a suspect whose stack has %s:%d (allocated at :%d)"
                % (truth["file"], e["cause_line"], e["allocating_line"]),
                "%d suspects, %s" % (len(found), ", ".join("%s:%d %s" % (os.path.basename(s["site"]["filename"]),
                                                                          s["site"]["line"], mib(s["bytes"]))
                                                            for s in found[:3])) if found else "none",
                bool(found))
        live_leak(c, server, truth, live, True, e["bytes_per_step"])
    elif name == "fragmentation":
        total = rep["fragmentation"][0]["total"]
        c.check("free bytes inside segments", mib(e["free_in_segments_bytes"]) + " ±2%", mib(total["external_bytes"]),
                abs(total["external_bytes"] - e["free_in_segments_bytes"]) <= 0.02 * e["free_in_segments_bytes"])
        c.check("largest free block (the allocator's own figure)", mib(e["largest_free_bytes"]),
                mib(total["largest_free_bytes"]), total["largest_free_bytes"] == e["largest_free_bytes"])
        share = total["external_bytes"] / max(1, total["reserved_bytes"])
        c.check("share of reserved memory free but fragmented", ">= 50%", "%.0f%%" % (share * 100), share >= 0.5)
    elif name == "oom_fragmentation":
        c.check("the job raised OutOfMemoryError", True, truth.get("raised"), truth.get("raised") is True)
        rep = reports.get("oom")
        if rep is None:
            c.check("OOM snapshot uploaded by the agent", "a snapshot tagged kind=oom", "none", False)
            return c.rows
        oom = rep["ooms"][0] if rep["ooms"] else None
        c.check("OOM verdict", e["verdict"], oom["verdict"] if oom else "no OOM in the snapshot",
                oom is not None and oom["verdict"] == e["verdict"])
        c.check("requested bytes", mib(e["requested_bytes"]), mib(oom["requested_bytes"]) if oom else "none",
                oom is not None and oom["requested_bytes"] == e["requested_bytes"])
        if oom:
            c.check("largest free block in the pool", "< " + mib(e["requested_bytes"]),
                    mib(oom["largest_free_block_bytes"]), oom["largest_free_block_bytes"] < e["requested_bytes"])
        if live:
            page = server.process_page(truth)
            events = [ev for ev in (page or {}).get("events", []) if ev["kind"] == "oom"]
            sid = reports.get("oom_id")
            c.check("live OOM event links the snapshot", sid, events[0]["snapshot_id"] if events else "no OOM event",
                    bool(events) and events[0]["snapshot_id"] == sid)
        else:
            c.skip("live OOM event links the snapshot", "the snapshot id", "live data not checked (--fixtures)")
    elif name == "expandable_segments":
        c.check("expandable segments on", True, rep["allocator_settings"].get("expandable_segments"),
                rep["allocator_settings"].get("expandable_segments") is True)
        c.check("segments (one growing segment per pool)", "%d (the allocator's count), at most 4" % e["segments"],
                rep["segments"], rep["segments"] == e["segments"] and rep["segments"] <= 4)
        c.check("reserved bytes", mib(e["reserved_bytes"]), mib(rep["reserved_bytes"]),
                rep["reserved_bytes"] == e["reserved_bytes"])
    elif name == "side_stream":
        c.check("pending-free bytes (record_stream)", mib(e["pending_free_bytes"]), mib(rep["pending_free_bytes"]),
                rep["pending_free_bytes"] == e["pending_free_bytes"])
    elif name == "outside_pytorch":
        c.check("cuMemAlloc succeeded", 0, truth.get("cu_mem_alloc_rc"), truth.get("cu_mem_alloc_rc") == 0)
        if "oom_verdict" in e:
            check_outside_oom(c, truth, e, reports.get("oom"))
        if not live:
            c.skip("memory outside PyTorch grows", mib(e["outside_pytorch_growth_bytes"]), "live only (--fixtures)")
            return c.rows
        page = server.process_page(truth)
        if page is None or not page["devices"]:
            c.check("memory outside PyTorch grows", mib(e["outside_pytorch_growth_bytes"]),
                    "no live data (is the collector relaying?)", False)
            return c.rows
        times, out = page["times"], page["devices"][0]["outside_pytorch"]

        def median_between(a, b):
            v = sorted(x for t, x in zip(times, out) if a <= t <= b and x is not None)
            return v[len(v) // 2] if v else None
        before = median_between(truth["before_ms"] - 2500, truth["before_ms"])
        after = median_between(truth["after_ms"] + 500, truth["after_ms"] + 2500)
        growth = after - before if before is not None and after is not None else None
        c.check("memory outside PyTorch grows", mib(e["outside_pytorch_growth_bytes"]) + " ±16 MiB",
                "%s (from %s to %s)" % (mib(growth), mib(before), mib(after)),
                growth is not None and abs(growth - e["outside_pytorch_growth_bytes"]) <= 16 * MIB)
    elif name == "cuda_graph":
        pools = [p for p in rep["fragmentation"][0]["pools"] if list(p["pool_id"]) != [0, 0]]
        c.check("private memory pool of the graph", ">= " + mib(e["private_pool_min_bytes"]),
                ", ".join("pool %s: %s" % (p["pool_id"], mib(p["reserved_bytes"])) for p in pools) or "none",
                any(p["reserved_bytes"] >= e["private_pool_min_bytes"] for p in pools))
    elif name == "ranks":
        dev = str(truth["device"])
        peak = rep["devices"].get(dev, {}).get("peak_requested_bytes")
        c.check("peak of rank %d on device %s" % (e["rank"], dev), mib(e["peak_bytes"]) + " (+64 MiB)", mib(peak),
                peak is not None and e["peak_bytes"] <= peak <= e["peak_bytes"] + 64 * MIB)
        if e.get("oom"):
            c.check("the rank raised OutOfMemoryError", True, truth.get("raised"), truth.get("raised") is True)
            lines = [(o.get("site") or {}).get("line") for o in rep["ooms"]]
            c.check("its OOM at the planted line", e["oom_line"], lines, e["oom_line"] in lines)
    return c.rows


def check_run(server, truths):
    """The ranks scenario's run (`GET /api/runs/{job}`): both ranks, the failing rank first, the
    imbalance with the planted line and the planted amount."""
    c = Checks("ranks.run")
    ranks = {t["expect"]["rank"]: t for t in truths}
    job = next(iter(ranks.values()))["expect"].get("job")
    if not job:
        return c.rows
    try:
        run = server.get("/api/runs/%s" % urllib.parse.quote(job, safe=""))
    except Exception as err:  # no run is a failed check
        c.check("run of job %s" % job, "%d ranks" % len(ranks), "%s: %s" % (type(err).__name__, err), False)
        return c.rows
    found = sorted(r["rank"] for r in run["ranks"])
    c.check("ranks in the run", sorted(ranks), found, found == sorted(ranks))
    failing = [r for r, t in sorted(ranks.items()) if t["expect"].get("oom")]
    first = (run.get("failed") or {}).get("rank")
    c.check("the rank that ran out of memory, shown first", failing[:1], [first, run["ranks"][0]["rank"]],
            bool(failing) and first == failing[0] and run["ranks"][0]["rank"] == failing[0])
    extra = max(t["expect"]["extra_bytes"] for t in truths)
    imb = run.get("imbalance") or {}
    top = (imb.get("sites") or [{}])[0]
    site = top.get("site") or {}
    line = next(iter(ranks.values()))["expect"]["imbalance_line"]
    c.check("the imbalance's call site", "%s:%d +%s" % (truths[0]["file"], line, mib(extra)),
            "%s:%s +%s" % (os.path.basename(site.get("filename", "?")), site.get("line"), mib(top.get("delta_bytes"))),
            in_file(site, truths[0]) and site.get("line") == line and top.get("delta_bytes") == extra)
    return c.rows


def verify(server, out_dir, live=True, uploaded=None):
    """Rows for every truth file in `out_dir`. `uploaded`: (truth file, kind) → id, for
    snapshots uploaded by the verifier itself (--fixtures)."""
    rows, ranks = [], []
    for path in sorted(glob.glob(os.path.join(out_dir, "*.truth.json"))):
        with open(path) as f:
            truth = json.load(f)
        reports = {}
        for kind in ("harness", "oom"):
            sid = (uploaded or {}).get((path, kind))
            if sid is None:
                sid = next((s["id"] for s in truth.get("snapshots", []) if s["kind"] == kind and s["id"]), None)
            if sid is None and any(s["kind"] == kind for s in truth.get("snapshots", [])):
                sid = server.find_snapshot(truth, kind)
            if sid is not None:
                reports[kind] = server.get("/api/snapshots/%s" % sid)
                reports[kind + "_id"] = sid
        try:
            rows += check_scenario(server, truth, reports, live)
        except Exception as e:  # a broken answer is a failed check, not a crash
            rows.append({"scenario": truth["scenario"], "check": "verification", "expected": "answers",
                         "found": "%s: %s" % (type(e).__name__, e), "result": "FAIL"})
        if truth["scenario"] == "ranks":
            ranks.append(truth)
    if len(ranks) >= 2:
        rows += check_run(server, ranks)
    return rows


def check_outside_oom(c, truth, e, rep):
    """The OOM dumped when memory outside PyTorch filled the device: the last OOM first, its
    verdict, line and the bytes held outside; the earlier probe after it."""
    c.check("the job raised OutOfMemoryError", True, truth.get("raised"), truth.get("raised") is True)
    if rep is None:
        c.check("OOM snapshot uploaded by the agent", "a snapshot tagged kind=oom", "none", False)
        return
    ooms = rep["ooms"]
    last = ooms[0] if ooms else None
    c.check("OOMs in the last dump, newest first", "2: the one that raised, then the probe",
            ", ".join("%s at event %d" % (o["verdict"], o["position"]) for o in ooms) or "none",
            len(ooms) == 2 and ooms[0]["time_us"] >= ooms[1]["time_us"])
    c.check("OOM verdict (device total from the agent)", e["oom_verdict"], last["verdict"] if last else "none",
            last is not None and last["verdict"] == e["oom_verdict"])
    site = (last or {}).get("site") or {}
    c.check("failing line", "%s:%d" % (truth["file"], e["oom_line"]),
            "%s:%s" % (os.path.basename(site.get("filename", "?")), site.get("line")),
            in_file(site, truth) and site.get("line") == e["oom_line"])
    out = (last or {}).get("outside_pytorch_bytes")
    c.check("held outside PyTorch", ">= " + mib(e["outside_min_bytes"]), mib(out),
            out is not None and out >= e["outside_min_bytes"])
    if len(ooms) > 1:
        probe = ooms[1]
        c.check("the earlier probe's verdict", e["probe_verdict"], probe["verdict"],
                probe["verdict"] == e["probe_verdict"])


def upload_fixtures(server, out_dir):
    """Uploads the snapshots kept next to the truth files, tagged as their scenario did."""
    uploaded = {}
    for path in sorted(glob.glob(os.path.join(out_dir, "*.truth.json"))):
        with open(path) as f:
            truth = json.load(f)
        for s in truth.get("snapshots", []):
            tags = {"scenario": truth["scenario"], "kind": s["kind"], "pid": truth["pid"]}
            if truth["scenario"] == "ranks":  # as the agent tags a rank's uploads
                tags.update({"job": truth["expect"]["job"], "rank": truth["expect"]["rank"]})
            # As the agent did: it sends the device's total memory with every snapshot.
            uploaded[(path, s["kind"])] = server.upload(os.path.join(out_dir, s["file"]), "fixture " + s["file"], tags,
                                                        truth.get("device_total_bytes"))
    return uploaded


def table(rows):
    cols = ("scenario", "check", "expected", "found", "result")
    cells = [[str(r[c]) for c in cols] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    out = ["| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths)) + " |",
           "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in cells]
    return "\n".join(out)
