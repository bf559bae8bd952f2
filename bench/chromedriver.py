"""chromedriver's HTTP protocol, for the bench scripts that drive the dashboard in Chromium
(`choose_to_drawn.py`, `choose_ab.py`, `same_drawings.py`): one chromedriver started on a port,
and a call to it. CHROMEDRIVER_LOG=PATH keeps chromedriver's verbose log (why a browser did not
start, say)."""
import json, os, subprocess, time, urllib.request


class Driver:
    def __init__(self, port):
        self.base = f'http://127.0.0.1:{port}'
        log = os.environ.get('CHROMEDRIVER_LOG')
        args = ['chromedriver', f'--port={port}'] + (['--verbose', f'--log-path={log}'] if log else [])
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)

    def call(self, method, path, body=None, base=None):
        """A WebDriver command's value (or, with `base`, any JSON answer's `value`)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request((base or self.base) + path, method=method, data=data,
                                     headers={'Content-Type': 'application/json'})
        return json.loads(urllib.request.urlopen(req).read() or b'{"value":null}')['value']

    def kill(self):
        self.process.kill()
