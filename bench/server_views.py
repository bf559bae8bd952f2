"""The 1 GB snapshot through the server (issue 14): upload + indexing, then every view the
dashboard opens, warm, and after a restart the first timeline (a stored first view) and the
first zoom (cold model cache: the model file read, with the index stored in it).

    python3 bench/server_views.py FILE [--runs N]

Starts `target/release/memscope serve` on a fresh data folder and a free port, uploads FILE
with a streamed POST (as the dashboard's file input does), times each view's request N times
(the first answer, the min and the median, ms, wall clock from this process over loopback; the first is
what a user opening that tab waits for, the ones after it may be answered from a cache), reads the server's peak RSS
(VmHWM), restarts it on the same folder and times the first timeline, restarts it again and
times a zoom (the first question that needs the model: its file read, the index in it). Prints a table and one
JSON line. Standard library only.
"""
import http.client, json, os, re, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEMSCOPE = os.environ.get("MEMSCOPE_BIN", os.path.join(ROOT, "target", "release", "memscope"))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start(data, port):
    log = open(os.path.join(data, "server.log"), "ab")
    p = subprocess.Popen([MEMSCOPE, "serve", "--data-dir", data, "--addr", f"127.0.0.1:{port}"],
                         stdout=log, stderr=log)
    for _ in range(600):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/api/health")
            if c.getresponse().status == 200:
                return p
        except OSError:
            time.sleep(0.05)
    sys.exit("server did not start")


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t = time.perf_counter()
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    ms = (time.perf_counter() - t) * 1e3
    if r.status != 200:
        sys.exit(f"GET {path}: {r.status} {body[:200]!r}")
    return ms, json.loads(body)


def peak_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024


def main():
    path = sys.argv[1]
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 5
    size = os.path.getsize(path)
    data = tempfile.mkdtemp(prefix="memscope-bench-")
    port = free_port()
    server = start(data, port)
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
        t = time.perf_counter()
        with open(path, "rb") as f:
            c.request("POST", "/api/snapshots?name=" + os.path.basename(path), body=f,
                      headers={"Content-Length": str(size), "Content-Type": "application/octet-stream"})
            sent = time.perf_counter() - t
            r = c.getresponse()
            up = json.loads(r.read())
        upload_s = time.perf_counter() - t
        if r.status not in (200, 201):
            sys.exit(f"upload: {r.status} {up}")
        # The server's own account: from the body's last byte to the analyses done and to the
        # commit (the client's "body sent" is earlier by what the socket buffers held).
        ingested = [l for l in open(os.path.join(data, "server.log"), errors="replace")
                    if "snapshot ingested" in l][-1]
        ingested = re.sub(r"\x1b\[[0-9;]*m", "", ingested)
        server_ms = {k: int(v) for k, v in re.findall(r"(\w+_ms)=(\d+)", ingested)}
        sid = up["id"]
        # The model file (index included) is written after the answer: when and how large.
        for _ in range(600):
            written = [l for l in open(os.path.join(data, "server.log"), errors="replace")
                       if "model file written" in l]
            if written:
                break
            time.sleep(0.05)
        written = re.sub(r"\x1b\[[0-9;]*m", "", written[-1]) if written else ""
        model = {k: int(v) for k, v in re.findall(r"(model_\w+)=(\d+)", written)}
        base = f"/api/snapshots/{sid}"
        # The first request of the whole-trace timeline computes it (and stores it as the first
        # view); every later one, the "first" of the table below included, reads it back.
        first_timeline_ms, tl = get(port, base + "/timeline")
        events = tl["timeline"]["events"]
        mid = events // 2
        views = {
            "report": base,
            "timeline (first view)": base + "/timeline",
            "timeline, event axis, whole": base + "/timeline?axis=event",
            "timeline, zoom 1/100 at the middle": f"{base}/timeline?axis=event&from={mid}&to={mid + events // 100}",
            "timeline, zoom 1/10": f"{base}/timeline?axis=event&from={mid}&to={mid + events // 10}",
            "state at the middle event": f"{base}/state?position={mid}",
            "segments": base + "/segments",
            "stacks": base + "/stacks",
            "stacks, held (bytes x time)": base + "/stacks?weight=held",
            "categories at the peak": base + "/categories",
            # The tab's first answer: what is known before any replay (asking starts the replays
            # on every core); then the whole table, which waits for them.
            "what-if, the tab's first answer (progress)": base + "/whatif/progress",
            "what-if (built-in settings)": base + "/whatif",
            "events around the middle": f"{base}/events?position={mid}",
        }
        times = {}
        for name, p in views.items():
            ms = [get(port, p)[0] for _ in range(runs)]
            times[name] = (ms[0], min(ms), statistics.median(ms))
        replayed = [re.sub(r"\x1b\[[0-9;]*m", "", l) for l in open(os.path.join(data, "server.log"), errors="replace")
                    if "what-if replayed" in l]
        background_whatif_ms = int(re.findall(r"whatif_ms=(\d+)", replayed[0])[0]) if replayed else None
        rss = peak_rss_mb(server.pid)
        server.send_signal(signal.SIGTERM)
        server.wait(60)
        server = start(data, port)
        cold_ms, _ = get(port, base + "/timeline")
        # The whole trace's timeline is stored (server/src/views.rs) and answered without the
        # model; a window needs it: a second restart, then a zoom first (model read + index).
        server.send_signal(signal.SIGTERM)
        server.wait(60)
        server = start(data, port)
        cold_window_ms, _ = get(port, f"{base}/timeline?axis=event&from={mid}&to={mid + events // 100}")
        loaded = [re.sub(r"\x1b\[[0-9;]*m", "", l) for l in open(os.path.join(data, "server.log"), errors="replace")
                  if "snapshot model loaded" in l]
        load = {k: v for k, v in re.findall(r"(read_ms|index_ms|index_stored)=(\w+)", loaded[-1])} if loaded else {}
        out = {
            "file": path, "file_mb": size / 1e6, "events": events,
            "upload_and_index_s": upload_s, "body_sent_s": sent, "server_ms": server_ms,
            "server_peak_rss_mb": rss, "first_timeline_after_upload_ms": first_timeline_ms, "background_whatif_ms": background_whatif_ms, "cold_first_timeline_ms": cold_ms,
            "cold_first_window_ms": cold_window_ms, "model_file": model, "cold_load": load,
            "views_ms": {k: {"first": v[0], "min": v[1], "median": v[2]} for k, v in times.items()},
        }
        print(f"{os.path.basename(path)}: {size / 1e6:.0f} MB, {events} events")
        print(f"  upload + indexing          {upload_s:8.2f} s  (body sent after {sent:.2f} s)")
        print(f"  after the body's last byte (server): parsed and indexed {server_ms.get('parsed_after_last_byte_ms')} ms, "
              f"analysed {server_ms.get('analysed_after_last_byte_ms')} ms, "
              f"committed {server_ms.get('after_last_byte_ms')} ms")
        print(f"  server peak RSS            {rss:8.0f} MB")
        if model:
            print(f"  model file (index included) written after the answer in {model.get('model_write_ms')} ms: "
                  f"{model.get('model_bytes', 0) / 1e6:.0f} MB, {model.get('model_bytes', 0) / max(events, 1):.1f} B/event")
        print(f"  timeline, the first request after the upload (computed, then stored): {first_timeline_ms:.1f} ms")
        for k, (first, lo, med) in times.items():
            print(f"  {k:34s} {first:7.1f} ms first, {lo:7.1f} ms min, {med:7.1f} ms median")
        print(f"  the what-if table, replayed by the first who asked (or in the background after the upload's answer): {background_whatif_ms} ms")
        print(f"  first timeline after restart {cold_ms:6.0f} ms (stored first view)")
        print(f"  first zoom after restart     {cold_window_ms:6.0f} ms (model file read in {load.get('read_ms')} ms, "
              f"index stored: {load.get('index_stored')}, derived in {load.get('index_ms')} ms)")
        print(json.dumps(out))
    finally:
        server.kill()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
