"""A dashboard tab's first load on a restarted server, alternated between builds (issue 41,
twenty-fourth part): what the dashboard bench's tab figures measure, in a minute instead of its
ten on a 1 GB file.

    python3 bench/tab_after_restart.py FILE ROUNDS BIN [BIN...]  [--view segments] [--gap-ms 1000]

FILE is uploaded once (by the first BIN) to a fresh data folder. Then each round, for each BIN in
turn: `BIN serve` started on that folder (cold: nothing in memory), the model loaded by a windowed
timeline query (as the bench's zooms load it), GAP ms of quiet, a fresh headless Chromium to the
view (the segment view at the middle event by default), and navigation start → drawn by the
page's own clock, with each API request's start and duration. Prints each load and the medians.
Needs chromedriver and chromium (Debian's); standard library only otherwise.
"""
import http.client, json, os, shutil, socket, statistics, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chromedriver import Driver

DRAWN = {
    'segments': "document.querySelectorAll('.segmap .block').length > 0",
    'stacks': "document.querySelectorAll('table.sites tr').length > 1",
    'leaks': "document.querySelector('section.leaks article.suspect, p.ok')",
    'oom': "document.querySelector('section.ooms article.oom, p.ok')",
}
# Resolves with performance.now() at the first frame after the view is in place.
NAV_TO_DRAWN = """const done = arguments[arguments.length - 1];
const check = () => { if (%s) { requestAnimationFrame(() => setTimeout(() => done(performance.now()), 0)); }
                      else { requestAnimationFrame(check); } };
check();"""
REQUESTS = """return performance.getEntriesByType('resource').filter(e => e.name.includes('/api/'))
  .map(e => [e.name.replace(/^.*\\/api\\/snapshots\\/[0-9a-f]+/, '').split('?')[0] || '/report',
             Math.round(e.startTime), Math.round(e.responseEnd - e.startTime)])"""


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


def serve(binary, data, port):
    log = open(os.path.join(data, 'server.log'), 'ab')
    p = subprocess.Popen([binary, 'serve', '--data-dir', data, '--addr', f'127.0.0.1:{port}'],
                         stdout=log, stderr=log)
    for _ in range(600):
        try:
            urllib.request.urlopen(f'http://127.0.0.1:{port}/api/health')
            return p
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f'{binary} did not start')


def upload(port, path):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=600)
    with open(path, 'rb') as f:
        c.request('POST', '/api/snapshots', body=f, headers={
            'Content-Length': str(os.path.getsize(path)), 'Content-Type': 'application/octet-stream'})
        r = c.getresponse()
        body = json.loads(r.read())
    if r.status not in (200, 201):
        raise SystemExit(f'upload: {r.status} {body}')
    return body['id']


def main():
    args = sys.argv[1:]

    def opt(name, default):
        if name not in args:
            return default
        k = args.index(name)
        value = args[k + 1]
        del args[k:k + 2]
        return value

    view, gap_ms = opt('--view', 'segments'), int(opt('--gap-ms', '1000'))
    path, rounds, bins = os.path.abspath(args[0]), int(args[1]), [os.path.abspath(b) for b in args[2:]]
    data = tempfile.mkdtemp(prefix='memscope-tab-')
    drv = Driver(free_port())
    port = free_port()
    base = f'http://127.0.0.1:{port}'
    p = serve(bins[0], data, port)
    sid = upload(port, path)
    events = json.loads(urllib.request.urlopen(f'{base}/api/snapshots/{sid}/info').read())['entries']
    time.sleep(3)  # the model file's write after the answer
    p.terminate()
    p.wait()
    query = f'&pos={events // 2}' if view == 'segments' else ''
    drawn = {b: [] for b in bins}
    try:
        for r in range(rounds):
            for b in bins:
                p = serve(b, data, port)
                t0 = time.time()
                urllib.request.urlopen(f'{base}/api/snapshots/{sid}/timeline?from=0&to=1&axis=event&buckets=10').read()
                load_ms = (time.time() - t0) * 1e3
                time.sleep(gap_ms / 1e3)
                profile = tempfile.mkdtemp(prefix='memscope-tab-profile-')
                session = drv.call('POST', '/session', {'capabilities': {'alwaysMatch': {'goog:chromeOptions': {'args': [
                    '--headless', '--no-sandbox', '--disable-gpu', '--window-size=1400,1000',
                    f'--user-data-dir={profile}']}}}})['sessionId']
                s = f'/session/{session}'
                drv.call('POST', f'{s}/timeouts', {'script': 120000})
                drv.call('POST', f'{s}/url', {'url': f'{base}/s/{sid}?view={view}{query}'})
                ms = drv.call('POST', f'{s}/execute/async', {'script': NAV_TO_DRAWN % DRAWN[view], 'args': []})
                requests = drv.call('POST', f'{s}/execute/sync', {'script': REQUESTS, 'args': []})
                drv.call('DELETE', s)
                shutil.rmtree(profile, ignore_errors=True)
                p.terminate()
                p.wait()
                drawn[b].append(ms)
                print(f'round {r} {os.path.basename(b)}: load {load_ms:.0f} ms, {view} drawn {ms:.0f} ms;',
                      ' '.join(f'{n} +{t0}/{d}' for n, t0, d in requests), flush=True)
    finally:
        drv.kill()
        shutil.rmtree(data, ignore_errors=True)
    for b in bins:
        v = sorted(drawn[b])
        print(f'{b}: {view} drawn median {statistics.median(v):.0f} ms [{v[0]:.0f}–{v[-1]:.0f}]')


if __name__ == '__main__':
    main()
