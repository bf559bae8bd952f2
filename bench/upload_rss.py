"""Issue 41: the server's upload path against the CLI, in memory. For each file, RUNS times:
a fresh `memscope serve` (temporary data folder, a free port), its VmRSS sampled every 10 ms
while the file is POSTed to /api/snapshots, the highest before the answer; then
`memscope analyze --json FILE`'s peak RSS (ru_maxrss). Prints MiB, both.

    python3 bench/upload_rss.py FILE [FILE ...]      (RUNS=2, MEMSCOPE_BIN=target/release/memscope)
"""
import http.client, os, shutil, socket, statistics, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEMSCOPE = os.environ.get("MEMSCOPE_BIN", os.path.join(ROOT, "target", "release", "memscope"))
RUNS = int(os.environ.get("RUNS", "2"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None


def server_peak(path):
    """Peak RSS (MiB) of a fresh server until it answers the upload of `path`."""
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
        peak, done = [0.0], threading.Event()

        def sample():
            while not done.is_set():
                r = rss_mib(p.pid)
                if r is not None:
                    peak[0] = max(peak[0], r)
                time.sleep(0.01)

        t = threading.Thread(target=sample)
        t.start()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        with open(path, "rb") as f:
            conn.request("POST", "/api/snapshots?name=rss", body=f,
                         headers={"Content-Length": str(os.path.getsize(path))})
            status = conn.getresponse().status
        done.set()
        t.join()
        if status >= 300:
            sys.exit(f"upload of {path} answered {status}")
        return peak[0]
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(data, ignore_errors=True)


def cli_peak(path):
    p = subprocess.Popen([MEMSCOPE, "analyze", "--json", path], stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    if status != 0:
        sys.exit(f"memscope analyze {path} failed")
    return ru.ru_maxrss / 1024


def main():
    for path in sys.argv[1:]:
        server, cli = [], []
        for _ in range(RUNS):
            server.append(server_peak(path))
            cli.append(cli_peak(path))
        print(f"{os.path.basename(path)}: upload path {min(server):.0f}–{max(server):.0f} MiB, "
              f"CLI {min(cli):.0f}–{max(cli):.0f} MiB (server − CLI, medians: "
              f"{statistics.median(server) - statistics.median(cli):+.0f} MiB)", flush=True)


if __name__ == "__main__":
    main()
