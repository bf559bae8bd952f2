"""Issue 41: the server's upload path against the CLI, in memory. For each file, RUNS times:
a fresh `memscope serve` (temporary data folder, a free port), its VmRSS and RssAnon sampled
every 5 ms while the file is POSTed to /api/snapshots, the highest of each before the answer;
then `memscope analyze --json FILE` sampled the same way. Prints MiB.

Beside the peaks, each process's own floor: the idle server's RSS before the upload, and the
CLI's peak on a 2 KB fixture. RSS counts the binary's code pages too (file-backed, shared with
the page cache): a server runs more of the same binary (HTTP, SQLite) than the CLI, so the
anonymous memory (RssAnon) is the one that says what the file costs each path.

    python3 bench/upload_rss.py FILE [FILE ...]      (RUNS=2, MEMSCOPE_BIN=target/release/memscope)
"""
import http.client, os, shutil, socket, statistics, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEMSCOPE = os.environ.get("MEMSCOPE_BIN", os.path.join(ROOT, "target", "release", "memscope"))
RUNS = int(os.environ.get("RUNS", "2"))
TINY = os.path.join(ROOT, "tests", "fixtures", "segments_only.pickle")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def memory_mib(pid):
    """(VmRSS, RssAnon) in MiB, or None once the process is gone."""
    got = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in ("VmRSS", "RssAnon"):
                    got[key] = int(line.split()[1]) / 1024
    except OSError:
        return None
    return (got["VmRSS"], got["RssAnon"]) if len(got) == 2 else None


class Peak:
    """The highest VmRSS and RssAnon of `pid`, sampled on a thread until `stop`."""

    def __init__(self, pid):
        self.pid, self.rss, self.anon = pid, 0.0, 0.0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample)
        self.thread.start()

    def _sample(self):
        while not self.done.is_set():
            m = memory_mib(self.pid)
            if m is not None:
                self.rss, self.anon = max(self.rss, m[0]), max(self.anon, m[1])
            time.sleep(0.005)

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.rss, self.anon


def server_peak(path):
    """(peak RSS, peak anon, idle RSS) of a fresh server until it answers the upload of `path`."""
    data = tempfile.mkdtemp(prefix="memscope-rss-")
    port = free_port()
    p = subprocess.Popen([MEMSCOPE, "serve", "--addr", f"127.0.0.1:{port}", "--data-dir", data],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        time.sleep(0.2)
        idle = memory_mib(p.pid)[0]
        peak = Peak(p.pid)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        with open(path, "rb") as f:
            conn.request("POST", "/api/snapshots?name=rss", body=f,
                         headers={"Content-Length": str(os.path.getsize(path))})
            status = conn.getresponse().status
        rss, anon = peak.stop()
        if status >= 300:
            sys.exit(f"upload of {path} answered {status}")
        return rss, anon, idle
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(data, ignore_errors=True)


def cli_floor_mib():
    """The CLI's peak RSS on a 2 KB file, through `/usr/bin/time`: the kernel's high-water
    mark of a child forked from Python would count Python's pages before the `exec`."""
    out = subprocess.run(["/usr/bin/time", "-f", "%M", MEMSCOPE, "analyze", "--json", TINY],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    return int(out.stderr.strip().splitlines()[-1]) / 1024


def cli_peak(path):
    """(peak RSS, peak anon) of `memscope analyze --json path`. RSS is the kernel's own
    high-water mark, which the sampler could miss (on a file this big the `exec`'s Python
    pages are far below it)."""
    p = subprocess.Popen([MEMSCOPE, "analyze", "--json", path], stdout=subprocess.DEVNULL)
    peak = Peak(p.pid)
    _, status, ru = os.wait4(p.pid, 0)
    _, anon = peak.stop()
    if status != 0:
        sys.exit(f"memscope analyze {path} failed")
    return ru.ru_maxrss / 1024, anon


def span(xs):
    return f"{min(xs):.0f}–{max(xs):.0f}"


def main():
    cli_floor = cli_floor_mib()
    for path in sys.argv[1:]:
        server, cli = [], []
        for _ in range(RUNS):
            server.append(server_peak(path))
            cli.append(cli_peak(path))
        med = lambda rows, k: statistics.median(r[k] for r in rows)
        idle = med(server, 2)
        print(f"{os.path.basename(path)}: upload path {span([s[0] for s in server])} MiB "
              f"(anon {span([s[1] for s in server])}; idle server {idle:.1f}), "
              f"CLI {span([c[0] for c in cli])} MiB (anon {span([c[1] for c in cli])}; "
              f"on a 2 KB file {cli_floor:.1f}). Server − CLI, medians: "
              f"{med(server, 0) - med(cli, 0):+.1f} MiB RSS, {med(server, 1) - med(cli, 1):+.1f} "
              f"anon, {(med(server, 0) - idle) - (med(cli, 0) - cli_floor):+.1f} above each "
              f"one's floor", flush=True)


if __name__ == "__main__":
    main()
