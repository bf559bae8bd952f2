"""Tests of memscope_agent against the stand-in torch (tests/fake_torch) and a stub server.

Run: python3 -m unittest discover -s collectors/python/tests
(The Rust tests in collectors/tests/it/agent.rs run the agent against the real server and collector.)
"""

import glob
import gzip
import http.server
import json
import os
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "fake_torch"), os.path.dirname(HERE)]

import torch  # noqa: E402  (the stand-in)
import memscope_agent  # noqa: E402
from memscope_agent import Agent, Settings  # noqa: E402


def reset_fake():
    torch.cuda.fake.__init__()


class StubServer:
    """Records ingest batches and snapshot uploads; answers 503 while `down` is set."""

    def __init__(self):
        self.batches, self.uploads, self.down = [], [], False
        # Uploads answered 503 (Retry-After: 0) before one is taken, as a server whose parse
        # memory is in use answers.
        self.busy_uploads = 0
        self.upload_auth = []
        stub = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                if stub.down:
                    self.send_response(503)
                    self.end_headers()
                    return
                if self.path != "/api/ingest" and stub.busy_uploads > 0:
                    stub.busy_uploads -= 1
                    self.send_response(503)
                    self.send_header("retry-after", "0")
                    self.end_headers()
                    return
                if self.path == "/api/ingest":
                    if self.headers["authorization"] != "Bearer tok":
                        self.send_response(401)
                        self.end_headers()
                        return
                    batch = json.loads(gzip.decompress(body))
                    stub.batches.append(batch)
                    answer = {"seq": batch["seq"], "duplicate": False, "stored": 1}
                else:
                    stub.upload_auth.append(self.headers["authorization"])
                    stub.uploads.append((self.path, body))
                    answer = {"id": "snap%d" % len(stub.uploads), "created": True}
                out = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def load(path):
    with open(path) as f:
        return json.load(f)


def wait_for(cond, timeout_s=10.0):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return False


class RelayMode(unittest.TestCase):
    def setUp(self):
        reset_fake()
        self.dir = tempfile.mkdtemp()

    def test_samples_land_in_the_collector_folder_with_uuid_step_and_segments(self):
        a = Agent(Settings(agent_dir=self.dir, interval_s=0.05, segments_interval_s=0.05),
                  torch_module=torch).start()
        a.set_step(7)
        time.sleep(0.4)
        a.stop()
        files = sorted(glob.glob(os.path.join(self.dir, "*.json")))
        self.assertTrue(files, "no files written")
        self.assertFalse(glob.glob(os.path.join(self.dir, "*.tmp")))
        samples = [s for f in files for s in load(f)["allocator"]]
        self.assertGreaterEqual(len(samples), 4)
        s = samples[-1]
        self.assertEqual(s["pid"], os.getpid())
        self.assertEqual(s["gpu_uuid"], "GPU-0a1b2c3d-0000-1111-2222-333344440000")
        self.assertEqual((s["allocated_bytes"], s["reserved_bytes"]), (512 << 20, 1 << 30))
        self.assertEqual(s["step"], 7)
        self.assertEqual(s["segments"], 1)
        self.assertEqual(s["largest_free_block_bytes"], (1 << 30) - (512 << 20))
        body = load(files[0])
        self.assertEqual(body["start_time_ms"], a.start_ms)
        self.assertGreater(a.start_ms, 1_500_000_000_000)

    def test_new_allocation_retries_become_one_event_each_time_they_grow(self):
        a = Agent(Settings(agent_dir=self.dir, interval_s=10.0), torch_module=torch)
        a.sample()
        torch.cuda.fake.retries = 3
        a.sample()
        a.sample()
        torch.cuda.fake.retries = 4
        a.sample()
        self.assertEqual([e["kind"] for e in a._events], ["alloc_retry", "alloc_retry"])
        self.assertIn("3 allocation retries", a._events[0]["message"])
        self.assertIn("4 allocation retries", a._events[1]["message"])
        self.assertIn("(1 new)", a._events[1]["message"])

    def test_with_history_recorded_segments_come_from_stats_not_snapshots(self):
        # A snapshot would make PyTorch symbolise recorded stacks from the agent's thread (a
        # 6 s first call that raced the training thread's imports on the GPU host).
        a = Agent(Settings(agent_dir=self.dir, interval_s=0.02, segments_interval_s=0.02, record_history=True),
                  torch_module=torch).start()
        time.sleep(0.2)
        a.stop()
        self.assertEqual(torch.cuda.fake.snapshots_taken, 0)
        samples = [s for f in sorted(glob.glob(os.path.join(self.dir, "*.json"))) for s in load(f)["allocator"]]
        self.assertTrue(samples)
        self.assertEqual({s["segments"] for s in samples}, {2})
        self.assertEqual({s["largest_free_block_bytes"] for s in samples}, {None})

    def test_a_process_that_never_used_cuda_sends_nothing(self):
        torch.cuda.fake.initialized = False
        a = Agent(Settings(agent_dir=self.dir, interval_s=0.02), torch_module=torch).start()
        time.sleep(0.15)
        a.stop()
        self.assertEqual(glob.glob(os.path.join(self.dir, "*.json")), [])

    def test_errors_never_reach_the_training_loop_and_are_logged_once(self):
        torch.cuda.fake.fail_stats = True
        a = Agent(Settings(agent_dir=self.dir, interval_s=0.01), torch_module=torch).start()
        with self.assertLogs("memscope_agent", "WARNING") as logs:
            for i in range(50):
                a._guard("step", a.set_step, i)
                time.sleep(0.002)
            a.stop()
        self.assertEqual(len([m for m in logs.output if "memory_stats broke" in m]), 1, logs.output)

    def test_step_samples_at_most_once_per_interval(self):
        a = Agent(Settings(agent_dir=self.dir, interval_s=10.0), torch_module=torch)
        for i in range(1000):
            a.set_step(i)
        self.assertEqual(len(a._alloc), 1)
        self.assertEqual(a._step, 999)

    def test_history_recording_is_bounded(self):
        Agent(Settings(agent_dir=self.dir, record_history=True, max_entries=1234), torch_module=torch).start().stop()
        self.assertEqual(torch.cuda.fake.history["max_entries"], 1234)
        self.assertEqual(torch.cuda.fake.history["stacks"], "python")


class DirectMode(unittest.TestCase):
    def setUp(self):
        reset_fake()
        self.srv = StubServer()
        self.snapdir = tempfile.mkdtemp()

    def tearDown(self):
        self.srv.close()

    def agent(self, **kw):
        s = Settings(server=self.srv.url, token="tok", name="gpu7", interval_s=0.05,
                     snapshot_dir=self.snapdir, job="llama", rank=3, tags="scenario=leak,team=ml", **kw)
        return Agent(s, torch_module=torch).start()

    def test_batches_are_numbered_under_the_tokens_name_and_nothing_is_lost_while_the_server_is_away(self):
        self.srv.down = True
        a = self.agent()
        time.sleep(0.5)
        self.assertEqual(self.srv.batches, [])
        self.srv.down = False
        a._retry_at = 0  # skip the rest of the backoff
        self.assertTrue(wait_for(lambda: len(self.srv.batches) >= len(a._backlog) + 8 and not a._backlog))
        a.stop()
        seqs = sorted(b["seq"] for b in self.srv.batches)
        self.assertEqual(seqs, list(range(1, len(seqs) + 1)), "every batch arrives once")
        b = self.srv.batches[0]
        self.assertTrue(b["collector"].startswith("gpu7/"), b["collector"])
        self.assertEqual(b["version"], 1)
        self.assertTrue(all(s["pid"] == os.getpid() for b in self.srv.batches for s in b["allocator"]))

    def test_an_oom_uploads_one_snapshot_per_incident_and_links_it_from_the_event(self):
        a = self.agent()
        torch.cuda.fake.fire_oom(requested=24 << 20)
        torch.cuda.fake.fire_oom(requested=24 << 20)  # a retry of the same incident
        a.stop()
        self.assertEqual(len(torch.cuda.fake.dumps), 1)
        self.assertEqual(len(self.srv.uploads), 1)
        path, body = self.srv.uploads[0]
        self.assertIn("kind%3Doom", path)
        self.assertIn("job%3Dllama", path)
        self.assertIn("rank%3D3", path)
        self.assertIn("scenario%3Dleak", path)
        self.assertIn("team%3Dml", path)
        self.assertIn("device_total_bytes=150754820096", path, "the device's size goes with it")
        self.assertTrue(body.startswith(b"\x80"), "a pickle")
        events = [e for b in self.srv.batches for e in b["events"]]
        self.assertEqual(len(events), 1)
        self.assertEqual(events[0]["kind"], "oom")
        self.assertEqual(events[0]["snapshot_id"], "snap1")
        self.assertIn("requested 25165824 bytes (24.00 MiB); the process may use 2.00 GiB; 8.00 MiB free",
                      events[0]["message"])
        self.assertEqual(os.listdir(self.snapdir), [], "the uploaded dump is removed")

    def test_snapshot_on_request(self):
        memscope_agent._agent = self.agent()
        try:
            sid = memscope_agent.snapshot("before eval", phase="eval")
        finally:
            memscope_agent.stop()
        self.assertEqual(sid, "snap1")
        self.assertEqual(self.srv.upload_auth, [None], "no API token set: none sent")
        self.assertIn("phase%3Deval", self.srv.uploads[0][0])
        self.assertIn("device_total_bytes=150754820096", self.srv.uploads[0][0])

    def test_an_upload_the_server_is_too_busy_for_is_sent_again(self):
        self.srv.busy_uploads = 2
        memscope_agent._agent = self.agent()
        try:
            sid = memscope_agent.snapshot("while the server parses others")
        finally:
            memscope_agent.stop()
        self.assertEqual(sid, "snap1", "taken on the third try")
        self.assertEqual(self.srv.busy_uploads, 0)
        self.assertEqual(len(self.srv.uploads), 1)

    def test_uploads_carry_the_api_token_where_one_is_set(self):
        memscope_agent._agent = self.agent(api_token="w-0123456789abcdef")
        try:
            memscope_agent.snapshot("with a token")
        finally:
            memscope_agent.stop()
        self.assertEqual(self.srv.upload_auth, ["Bearer w-0123456789abcdef"])

    def test_a_refused_batch_is_logged_and_does_not_block_the_rest(self):
        s = Settings(server=self.srv.url, token="wrong", name="gpu7", interval_s=0.05, snapshot_dir=self.snapdir)
        with self.assertLogs("memscope_agent", "WARNING") as logs:
            a = Agent(s, torch_module=torch).start()
            time.sleep(0.3)
            a.stop()
        self.assertTrue(any("refused" in m and "401" in m for m in logs.output), logs.output)
        self.assertEqual(a._backlog, [])


class ModuleApi(unittest.TestCase):
    def test_start_is_once_per_process_and_step_without_agent_is_harmless(self):
        reset_fake()
        memscope_agent.step(3)  # no agent: nothing happens
        d = tempfile.mkdtemp()
        a = memscope_agent.start(agent_dir=d, interval_s=0.05)
        self.assertIs(memscope_agent.start(agent_dir="/elsewhere"), a)
        memscope_agent.step()
        memscope_agent.step()
        self.assertEqual(a._step, 2)
        memscope_agent.stop()
        self.assertIsNone(memscope_agent._agent)

    def test_a_forked_child_has_no_agent(self):
        reset_fake()
        a = memscope_agent.start(agent_dir=tempfile.mkdtemp(), interval_s=10)
        self.assertIsNotNone(a)
        pid = os.fork()
        if pid == 0:  # the child: no agent, step() is a no-op
            memscope_agent.step(5)
            os._exit(0 if memscope_agent._agent is None else 1)
        _, status = os.waitpid(pid, 0)
        memscope_agent.stop()
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        self.assertEqual(a._step, None, "the child's step() did not reach the parent's agent")

    def test_settings_come_from_the_environment(self):
        env = {"MEMSCOPE_SERVER": "http://x:1/", "MEMSCOPE_TOKEN": "t", "MEMSCOPE_INTERVAL_S": "0.1",
               "MEMSCOPE_RECORD_HISTORY": "1", "RANK": "5", "MEMSCOPE_JOB": "j"}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            s = Settings()
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k)
                else:
                    os.environ[k] = v
        self.assertEqual((s.server, s.mode, s.interval_s, s.record_history, s.rank, s.job),
                         ("http://x:1", "direct", 0.1, True, "5", "j"))


if __name__ == "__main__":
    unittest.main()
