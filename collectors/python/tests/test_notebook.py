"""memscope_agent.record() and show() against the stand-in torch (tests/fake_torch) and the stub
server of test_agent.py: a block recorded and dumped on exit and on the OOM that ends it, named
and tagged with job and rank, a warning when the dump holds no history, the upload, and the
inline report (the real `memscope report`, MEMSCOPE_BIN, when ./scripts/test sets it).

Run: python3 -m unittest discover -s collectors/python/tests
"""

import os
import pickle
import sys
import tempfile
import unittest
import urllib.parse
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "fake_torch"), os.path.dirname(HERE), HERE]

import torch  # noqa: E402  (the stand-in)
import memscope_agent  # noqa: E402
from test_agent import StubServer, reset_fake  # noqa: E402


def with_trace(entries):
    """The stand-in's snapshot with `entries` trace entries on device 0 (history recorded)."""
    real = torch.cuda.memory._snapshot

    def snapshot(device=None):
        s = real(device)
        s["device_traces"][0] = [{"action": "alloc", "addr": 0x7f0000000000, "size": 512, "stream": 0,
                                  "time_us": 1 + i, "frames": []} for i in range(entries)]
        return s

    return snapshot


class Record(unittest.TestCase):
    def setUp(self):
        reset_fake()
        self.dir = tempfile.mkdtemp()
        self.cwd = os.getcwd()
        os.chdir(self.dir)
        self.real_snapshot = torch.cuda.memory._snapshot

    def tearDown(self):
        torch.cuda.memory._snapshot = self.real_snapshot
        os.chdir(self.cwd)
        for k in ["RANK", "MEMSCOPE_JOB", "MEMSCOPE_SERVER"]:
            os.environ.pop(k, None)

    def test_a_block_is_recorded_and_dumped_named_for_its_job_and_rank(self):
        torch.cuda.memory._snapshot = with_trace(5)
        os.environ["RANK"] = "3"
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            with memscope_agent.record(job="sweep") as rec:
                self.assertEqual(torch.cuda.fake.history["enabled"], "all")
                self.assertEqual(torch.cuda.fake.history["max_entries"], 100_000)
                self.assertIsNone(rec.path)
        self.assertEqual(said, [], "history was recorded: no warning")
        self.assertEqual(torch.cuda.fake.history["enabled"], None, "recording stopped")
        self.assertTrue(rec.path.startswith("memscope-sweep-rank3-") and rec.path.endswith(".pickle"), rec.path)
        self.assertFalse(rec.oom)
        self.assertEqual(rec.events, 5)
        with open(rec.path, "rb") as f:
            self.assertIn("segments", pickle.load(f))

    def test_the_oom_that_ends_a_block_is_dumped_and_raised_on(self):
        torch.cuda.memory._snapshot = with_trace(2)
        with self.assertRaises(RuntimeError):
            with memscope_agent.record(path="run-{rank}.pickle", rank=1) as rec:
                raise RuntimeError("CUDA out of memory. Tried to allocate 24.00 MiB")
        self.assertTrue(rec.oom)
        self.assertEqual(rec.path, "run-1.pickle")
        self.assertTrue(os.path.exists("run-1.pickle"))
        self.assertEqual(torch.cuda.fake.dumps, ["run-1.pickle"])
        # Another error is not an OOM, and is raised on too.
        with self.assertRaises(KeyError):
            with memscope_agent.record(rank=0, job="j") as rec2:
                raise KeyError("x")
        self.assertFalse(rec2.oom)
        self.assertTrue(rec2.path.startswith("memscope-j-rank0-"), rec2.path)

    def test_a_dump_without_history_says_so(self):
        # The stand-in's traces are empty: history recorded nothing.
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            with memscope_agent.record(rank=0) as rec:
                pass
        self.assertEqual(rec.events, 0)
        self.assertEqual(len(said), 1)
        text = str(said[0].message)
        self.assertIn("holds no allocation history", text)
        self.assertIn(rec.path, text)

    def test_it_is_uploaded_tagged_with_job_and_rank_when_a_server_is_set(self):
        torch.cuda.memory._snapshot = with_trace(1)
        stub = StubServer()
        try:
            with memscope_agent.record(job="exp7", rank=2, server=stub.url) as rec:
                pass
        finally:
            stub.close()
        self.assertEqual(rec.snapshot_id, "snap1")
        path, body = stub.uploads[0]
        q = urllib.parse.parse_qs(urllib.parse.urlparse(path).query)
        tags = dict(t.split("=", 1) for t in q["tags"][0].split(","))
        self.assertEqual((tags["job"], tags["rank"], tags["kind"]), ("exp7", "2", "recorded"))
        with open(rec.path, "rb") as f:
            self.assertEqual(f.read(), body)

    def test_the_report_shows_inline(self):
        with memscope_agent.record(rank=0) as rec:
            self.assertIn("recording", rec._repr_html_())
        exe = os.environ.get("MEMSCOPE_BIN")
        if not exe:
            # Without the command the cell says so instead of failing.
            os.environ["MEMSCOPE_BIN"] = "/nonexistent/memscope"
            try:
                self.assertIn("no report", rec._repr_html_())
            finally:
                del os.environ["MEMSCOPE_BIN"]
            self.skipTest("MEMSCOPE_BIN not set (./scripts/test sets it): the real report is not checked")
        page = rec._repr_html_()
        self.assertTrue(page.startswith('<iframe class="memscope-report-frame"'), page[:200])
        self.assertIn("memscope-report", page)
        self.assertIn(os.path.basename(rec.path), page)
        self.assertIn("### memscope report:", memscope_agent.show(rec.path).markdown())


if __name__ == "__main__":
    unittest.main()
