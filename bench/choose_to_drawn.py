# Chooses FILE in memscope's library page (BASE: a running `memscope serve`) through chromedriver
# (port 9517) N times and prints, from the choice: the first snapshot page (a reading's
# `local-…` or the stored id), its timeline drawn (clicking the Timeline tab if it opened on
# another view), the stored snapshot's page, its timeline drawn again, and whether the two
# drawings are the same PNG. UP=BYTES_PER_S slows the upload (Chromium's network emulation).
# Deletes the snapshot after each round. Issue 41, twelfth part (bench/README.md):
#     UP=20000000 python3 bench/choose_to_drawn.py /tmp/gpt_fresh_x73.pickle http://127.0.0.1:8311 3
import hashlib, json, os, sys, time

from chromedriver import Driver
F, BASE, N = os.path.abspath(sys.argv[1]), sys.argv[2], int(sys.argv[3])
drv = Driver(9517)
call = drv.call
CANVAS = "(()=>{const c=document.getElementById('timeline-canvas'); if(!c) return 0; const d=c.getContext('2d').getImageData(0,0,c.width,c.height).data; let n=0; for(let i=3;i<d.length;i+=4) if(d[i]) n++; return n;})()"
DATA = "(()=>{const c=document.getElementById('timeline-canvas'); return c ? c.toDataURL() : ''})()"
try:
    for r in range(N):
        s = call('POST', '/session', {'capabilities': {'alwaysMatch': {'goog:loggingPrefs': {'browser': 'ALL'}, 'goog:chromeOptions': {'args': ['--headless', '--no-sandbox', '--disable-gpu', '--window-size=1400,1000', f'--user-data-dir=/tmp/memscope-choose-{r}']}}}})['sessionId']
        ex = lambda js: call('POST', f'/session/{s}/execute/sync', {'script': js, 'args': []})
        call('POST', f'/session/{s}/url', {'url': BASE + '/'})
        if os.environ.get('UP'):
            cdp = lambda cmd, params: call('POST', f'/session/{s}/goog/cdp/execute', {'cmd': cmd, 'params': params})
            cdp('Network.enable', {})
            cdp('Network.emulateNetworkConditions', {'offline': False, 'latency': 0, 'downloadThroughput': -1, 'uploadThroughput': float(os.environ['UP'])})
        while not ex("return !!document.querySelector('#file-input')"): time.sleep(0.02)
        # A scrollbar on both pages, so both charts get the same width (as the browser test).
        ex("document.documentElement.style.overflowY = 'scroll'")
        eid = list(call('POST', f'/session/{s}/element', {'using': 'css selector', 'value': '#file-input'}).values())[0]
        t0 = time.time()
        call('POST', f'/session/{s}/element/{eid}/value', {'text': F})
        while not ex("return location.pathname.startsWith('/s/')"): time.sleep(0.01)
        t1 = time.time(); href1 = ex('return location.href')
        if 'view=timeline' not in href1:
            while not ex("return !!document.querySelector(\".tab[data-tab='timeline']\")"): time.sleep(0.01)
            ex("document.querySelector(\".tab[data-tab='timeline']\").click()")
        while ex("return " + CANVAS) <= 5000: time.sleep(0.01)
        t2 = time.time(); d1 = ex("return " + DATA); line = ex("const p=document.querySelector('p.reading'); return p ? p.innerText : ''")
        while ex("return location.pathname.includes('local-')"): time.sleep(0.01)
        t3 = time.time()
        time.sleep(0.3)
        while ex("return " + CANVAS) <= 5000: time.sleep(0.01)
        t4 = time.time(); d2 = ex("return " + DATA)
        sid = ex("return location.pathname").split('/s/')[1]
        logs = call('POST', f'/session/{s}/se/log', {'type': 'browser'})
        print(f"run {r}: page {t1-t0:.3f} ({href1.split('/s/')[1]}), drawn {t2-t0:.3f}, stored {t3-t0:.3f} ({sid}), drawn again {t4-t0:.3f}; same drawing: {d1 == d2} ({hashlib.md5(d1.encode()).hexdigest()[:8]} {hashlib.md5(d2.encode()).hexdigest()[:8]})", flush=True)
        print('  line:', line[:120]); print('  console:', [l['message'][:200] for l in logs if l['level'] in ('SEVERE', 'WARNING')][:12])
        call('DELETE', f'/session/{s}')
        call('DELETE', f'/api/snapshots/{sid}', base=BASE)
finally:
    drv.kill()
