# Two dashboards draw the same timeline? Uploads each FILE to both running `memscope serve`s
# (BASE_A, BASE_B: two builds) and compares, through chromedriver (port 9518), the PNG of the
# timeline's chart and of its minimap on five views of each: the whole trace, a window of a fifth,
# a window of a hundredth, by category, and on the time axis. A change to how the chart is drawn
# that must not change what is drawn is checked with it (issue 41, thirteenth part: a band drawn
# as its steps). Both pages get a scrollbar, and a pair whose charts came out at different widths
# (the page laid out before the scrollbar) is taken again.
#     python3 bench/same_drawings.py http://127.0.0.1:8311 http://127.0.0.1:8312 FILE...
import base64, json, os, sys, time, urllib.request

from chromedriver import Driver

A, B, FILES = sys.argv[1], sys.argv[2], sys.argv[3:]
OUT = os.environ.get('OUT', '/tmp/memscope-same-drawings')
drv = Driver(9518)
call = drv.call


def upload(base, path):
    req = urllib.request.Request(base + '/api/snapshots?name=same.pickle', method='POST', data=open(path, 'rb').read())
    return json.loads(urllib.request.urlopen(req).read())['id']


def views(base, sid):
    """The five views, windows placed on the trace's own axis."""
    t = json.loads(urllib.request.urlopen(f'{base}/api/snapshots/{sid}/timeline?buckets=10&allocations=0').read())
    x0, x1 = t['timeline']['x_from'], t['timeline']['x_to']
    w = lambda a, b: f'view=timeline&from={x0 + (x1 - x0) * a:.0f}&to={x0 + (x1 - x0) * b:.0f}'
    return ['view=timeline', w(0.1, 0.3), w(0.45, 0.46), 'view=timeline&by=category', 'view=timeline&axis=time']


session = call('POST', '/session', {'capabilities': {'alwaysMatch': {'goog:chromeOptions': {
    'args': ['--headless', '--no-sandbox', '--disable-gpu', '--window-size=1400,1000']}}}})['sessionId']
ex = lambda js: call('POST', f'/session/{session}/execute/sync', {'script': js, 'args': []})


def grab(url):
    call('POST', f'/session/{session}/url', {'url': url})
    ex("document.documentElement.style.overflowY = 'scroll'")
    started = time.time()
    while time.time() - started < 20 and not ex(
            "const c = document.getElementById('timeline-canvas'); if (!c) return false;"
            "return c.getContext('2d').getImageData(c.width >> 1, c.height >> 1, 1, 1).data[3] > 0"):
        time.sleep(0.1)
    time.sleep(3.0)  # the minimap, the what-if line and any later redraw settle
    return ex("const c = document.getElementById('timeline-canvas'), m = document.getElementById('minimap');"
              "return [c ? c.toDataURL() : '', m ? m.toDataURL() : '', c ? c.width : 0]")


same = differ = 0
try:
    os.makedirs(OUT, exist_ok=True)
    for path in FILES:
        ia, ib = upload(A, path), upload(B, path)
        for q in views(A, ia):
            for _ in range(4):
                a, b = grab(f'{A}/s/{ia}?{q}'), grab(f'{B}/s/{ib}?{q}')
                if a[2] == b[2]:
                    break
            if not a[0]:
                print(f'  no chart: {path} {q}')
                continue
            if a[:2] == b[:2]:
                same += 1
                continue
            differ += 1
            print(f'  DIFFERENT: {path} {q} (chart same: {a[0] == b[0]}, minimap same: {a[1] == b[1]})')
            for k, (x, y) in enumerate([(a[0], b[0]), (a[1], b[1])]):
                for side, png in (('a', x), ('b', y)):
                    with open(f'{OUT}/{differ}-{k}-{side}.png', 'wb') as f:
                        f.write(base64.b64decode(png.split(',')[1]))
        print(f'{path}: done', flush=True)
finally:
    call('DELETE', f'/session/{session}')
    drv.kill()
print(f'same {same}, different {differ} (PNGs of each difference in {OUT})')
