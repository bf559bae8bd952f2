# Choosing FILE on the library page → the timeline drawn, by the page's own clock, alternated
# between running `memscope serve`s (BASES, comma-separated: two builds), N rounds each, through
# chromedriver (port 9517). Each round: a fresh browser profile, the file chosen, the Timeline tab
# clicked from inside the page as soon as it is there, and from the input's `change` event: the
# upload's request (start, end), the snapshot page's requests, the click and the first frame that
# finds the chart drawn (one pixel: every drawing paints the whole canvas, paper first). Prints
# each round and, per server, the sorted drawn times and what came after the upload's answer.
# The snapshot is deleted after each round (a file already stored does not open its page).
# PROF=1 also saves the page's CPU profile of each round (CDP Profiler) as prof{N}.json in $OUT.
# Issue 41, thirteenth part (bench/README.md):
#     python3 bench/choose_ab.py /tmp/gpt_fresh_x73.pickle http://127.0.0.1:8311,http://127.0.0.1:8312 8
import json, os, shutil, statistics, sys, tempfile, time

from chromedriver import Driver

FILE, BASES, N = os.path.abspath(sys.argv[1]), sys.argv[2].split(','), int(sys.argv[3])
OUT = os.environ.get('OUT', '/tmp')
drv = Driver(9517)
call = drv.call

WATCH = r"""
const m = window.__m = {};
document.querySelector('#file-input').addEventListener('change', () => { m.chosen = performance.now(); }, true);
const frame = () => {
  if (m.chosen !== undefined && location.pathname.startsWith('/s/')) {
    if (m.page === undefined) m.page = performance.now();
    const tab = document.querySelector(".tab[data-tab='timeline']");
    if (tab && m.click === undefined && !location.search.includes('view=timeline')) { m.click = performance.now(); tab.click(); }
    const c = document.getElementById('timeline-canvas');
    if (c && c.width > 0 && c.getContext('2d').getImageData(c.width >> 1, c.height >> 1, 1, 1).data[3] > 0) { m.drawn = performance.now(); return; }
  }
  requestAnimationFrame(frame);
};
requestAnimationFrame(frame);
"""
TIMES = r"""
const m = window.__m, t0 = m.chosen, ms = t => Math.round(t - t0), o = {};
for (const e of performance.getEntriesByType('resource')) {
  if (e.startTime < t0) continue;
  const name = e.name.replace(location.origin, '').split('?')[0].replace(/[0-9a-f]{16}/, 'ID');
  if (name.startsWith('/api/uploads')) continue;  // the parse progress, polled
  o[e.initiatorType === 'xmlhttprequest' ? 'upload' : name] = [ms(e.startTime), ms(e.responseEnd)];
}
o.page = ms(m.page); o.click = m.click === undefined ? null : ms(m.click); o.drawn = ms(m.drawn);
return o;
"""
rows = []
try:
    for r in range(N * len(BASES)):
        base = BASES[r % len(BASES)]
        # A fresh profile each round, of its own: a browser killed in an earlier run leaves its
        # profile locked.
        profile = tempfile.mkdtemp(prefix='memscope-choose-ab-')
        session = call('POST', '/session', {'capabilities': {'alwaysMatch': {'goog:chromeOptions': {'args': [
            '--headless', '--no-sandbox', '--disable-gpu', '--window-size=1400,1000',
            f'--user-data-dir={profile}']}}}})['sessionId']
        ex = lambda js: call('POST', f'/session/{session}/execute/sync', {'script': js, 'args': []})
        cdp = lambda cmd, params: call('POST', f'/session/{session}/goog/cdp/execute', {'cmd': cmd, 'params': params})
        call('POST', f'/session/{session}/url', {'url': base + '/'})
        while not ex("return !!document.querySelector('#file-input')"):
            time.sleep(0.02)
        ex("document.documentElement.style.overflowY = 'scroll'")
        ex(WATCH)
        if os.environ.get('PROF'):
            cdp('Profiler.enable', {}); cdp('Profiler.setSamplingInterval', {'interval': 100}); cdp('Profiler.start', {})
        element = list(call('POST', f'/session/{session}/element', {'using': 'css selector', 'value': '#file-input'}).values())[0]
        call('POST', f'/session/{session}/element/{element}/value', {'text': FILE})
        while not ex("return window.__m.drawn !== undefined"):
            time.sleep(0.05)
        if os.environ.get('PROF'):
            with open(f'{OUT}/prof{r}.json', 'w') as f:
                json.dump(cdp('Profiler.stop', {})['profile'], f)
        t = ex(TIMES)
        print(f"round {r} {base}: drawn {t['drawn']} ms; {json.dumps(t)}", flush=True)
        rows.append((base, t))
        sid = ex("return location.pathname").split('/s/')[1]
        call('DELETE', f'/session/{session}')
        shutil.rmtree(profile, ignore_errors=True)
        call('DELETE', f'/api/snapshots/{sid}', base=base)
finally:
    drv.kill()
for base in BASES:
    ts = [t for b, t in rows if b == base]
    drawn = sorted(t['drawn'] for t in ts)
    after = sorted(t['drawn'] - t['upload'][1] for t in ts if 'upload' in t)
    print(f"{base}: drawn {drawn} (median {statistics.median(drawn):.0f} ms); "
          f"after the upload's answer {after} (median {statistics.median(after):.0f} ms)")
