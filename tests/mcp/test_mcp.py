"""`memscope mcp` driven by the official Python MCP client SDK (PyPI `mcp`), as a coding agent
would: a real `memscope mcp` process over stdio, its tools listed, each one called on the
recorded fixtures and its answer checked against what the CLI prints for the same question
(the same `api` types as the HTTP API) and against the recordings' ground truth.

Run by ./scripts/test in a virtualenv that has `mcp`; MEMSCOPE_BIN names the binary (default
target/release/memscope), MEMSCOPE_MCP_TRANSCRIPT a file to write what was asked and answered.
"""

import asyncio
import json
import os
import subprocess
import tempfile
import unittest
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client import Client
from mcp.client.stdio import stdio_client

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("MEMSCOPE_BIN", str(ROOT / "target" / "release" / "memscope"))
FIX = ROOT / "tests" / "fixtures"
TRANSCRIPT = []


def cli_json(*args):
    """What `memscope ARGS --json` prints, parsed."""
    out = subprocess.run([BIN, *args, "--json"], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def server():
    return StdioServerParameters(command=BIN, args=["mcp"], cwd=str(ROOT))


def note(line):
    TRANSCRIPT.append(line)


async def call(session, name, arguments):
    """Calls a tool; its structured answer (asserting the text is the same JSON), or the error."""
    result = await session.call_tool(name, arguments)
    text = result.content[0].text
    if result.is_error:
        note(f"call {name} {json.dumps(arguments)} -> error: {text}")
        return None, text
    assert len(text.encode()) <= 256 * 1024, f"{name}: {len(text)} bytes"
    answer = result.structured_content
    assert json.loads(text) == answer, f"{name}: the text is not the structured answer"
    note(f"call {name} {json.dumps(arguments)} -> ok, {len(text):,} bytes of JSON")
    return answer, None


class McpTest(unittest.TestCase):
    @classmethod
    def tearDownClass(cls):
        path = os.environ.get("MEMSCOPE_MCP_TRANSCRIPT")
        if path:
            Path(path).write_text("\n".join(TRANSCRIPT) + "\n")

    def run_session(self, body):
        async def go():
            async with stdio_client(server()) as (r, w):
                async with ClientSession(r, w) as s:
                    init = await s.initialize()
                    note(f"initialize -> protocol {init.protocol_version}, server {init.server_info.name} {init.server_info.version}")
                    await body(s)

        asyncio.run(go())

    def test_tools_are_listed_with_schemas(self):
        async def body(s):
            tools = (await s.list_tools()).tools
            names = [t.name for t in tools]
            note("tools/list -> " + ", ".join(names))
            for want in ["report", "oom_verdicts", "leak_suspects", "peak_memory", "memory_by_stack",
                         "categories", "whatif", "predict", "diff", "run"]:
                self.assertIn(want, names)
            for t in tools:
                self.assertEqual(t.input_schema["type"], "object")
                self.assertFalse(t.input_schema["additionalProperties"])
                self.assertTrue(t.description)

        self.run_session(body)

    def test_the_default_client_falls_back_to_the_handshake(self):
        async def go():
            async with Client(server()) as c:
                self.assertIn(c.session.protocol_version, ["2025-11-25", "2025-06-18"])
                answer = await c.call_tool("leak_suspects", {"file": str(FIX / "leak_detached_cache.pickle")})
                self.assertFalse(answer.is_error)
                note(f"Client(mode=auto) -> protocol {c.session.protocol_version}")

        asyncio.run(go())

    def test_report_is_the_clis_report(self):
        async def body(s):
            f = str(FIX / "oom_fraction.pickle")
            answer, err = await call(s, "report", {"file": f})
            self.assertIsNone(err)
            self.assertEqual(answer["report"], cli_json("analyze", f))
            figures = json.loads((FIX / "oom_fraction.figures.json").read_text())
            self.assertEqual(answer["report"]["reserved_bytes"], figures["reserved_bytes"])
            self.assertEqual(answer["report"]["devices"]["0"]["entries"], figures["devices"]["0"]["entries"])

        self.run_session(body)

    def test_oom_verdicts_name_the_limit_and_the_growing_line(self):
        async def body(s):
            f = str(FIX / "oom_fraction.pickle")
            answer, _ = await call(s, "oom_verdicts", {"file": f})
            truth = json.loads((FIX / "oom_fraction.truth.json").read_text())
            self.assertEqual(answer["oom_count"], 1)
            oom = answer["ooms"][0]
            self.assertEqual(oom["requested_bytes"], truth["oom_observer"]["alloc"])
            self.assertEqual(oom["verdict"], "growth")
            self.assertEqual(oom["recovery"], "fatal")
            # The line the recording kept growing is the one the verdict names.
            self.assertEqual(oom["growth"]["site"]["line"], truth["leaks"][0]["line"])
            self.assertIn("Tried to allocate 24.00 MiB", oom["pytorch_message"])
            self.assertIsNotNone(answer["oom_outcome"])

        self.run_session(body)

    def test_leak_suspects_find_the_planted_leak(self):
        async def body(s):
            f = str(FIX / "leak_detached_cache.pickle")
            answer, _ = await call(s, "leak_suspects", {"file": f, "top": 3})
            truth = json.loads((FIX / "leak_detached_cache.truth.json").read_text())["leaks"][0]
            self.assertEqual(answer["leak_check"], "ran")
            top = answer["leak_suspects"][0]
            self.assertEqual((top["site"]["filename"].rsplit("/", 1)[-1], top["site"]["line"]),
                             (truth["file"], truth["line"]))
            self.assertEqual(top["count"], truth["events"])
            self.assertEqual(top["bytes"], truth["events"] * truth["per_event_bytes_approx"])
            self.assertLessEqual(len(answer["leak_suspects"]), 3)

        self.run_session(body)

    def test_peak_and_stacks_and_categories_agree_with_the_cli(self):
        async def body(s):
            f = str(FIX / "steady_train.pickle")
            report = cli_json("analyze", f)
            peak, _ = await call(s, "peak_memory", {"file": f, "top": 5})
            d0 = report["devices"]["0"]
            self.assertEqual(peak["devices"]["0"]["peak_allocated_bytes"], d0["peak_allocated_bytes"])
            self.assertEqual(peak["devices"]["0"]["peak_reserved_bytes"], d0["peak_reserved_bytes"])
            self.assertLessEqual(len(peak["at_peak"]["sites"]), 5)
            self.assertTrue(all(len(x["frames"]) <= 12 for x in peak["at_peak"]["sites"]))
            # Without a trace the peaks are still known (from the segments); the stacks are not.
            seg, _ = await call(s, "peak_memory", {"file": str(FIX / "segments_only.pickle")})
            self.assertIsNone(seg["at_peak"])
            self.assertIn("allocation history", seg["at_peak_unavailable"])
            self.assertLessEqual(sum(x["bytes"] for x in peak["at_peak"]["sites"]), peak["at_peak"]["total_bytes"])

            cats = cli_json("categories", f)
            position = cats["position"]
            by_stack, _ = await call(s, "memory_by_stack", {"file": f, "position": position, "flame": True})
            # Memory by stack at the peak covers what the categories count there.
            self.assertEqual(by_stack["position"], position)
            self.assertEqual(by_stack["total_bytes"], sum(cats["totals"].values()))
            self.assertTrue(by_stack["flame"]["children"])
            mine, _ = await call(s, "categories", {"file": f, "limit": 7})
            self.assertEqual(mine["totals"], cats["totals"])
            self.assertEqual(mine["count"], cats["count"])
            self.assertEqual(mine["allocations"], cats["allocations"][:7])
            only, _ = await call(s, "memory_by_stack", {"file": f, "category": "parameter"})
            self.assertEqual(only["total_bytes"], cats["totals"]["parameter"])
            past, err = await call(s, "categories", {"file": f, "position": 10**9})
            self.assertIsNone(past)
            self.assertIn("past the trace's end", err)

        self.run_session(body)

    def test_whatif_predict_diff_and_run_are_the_clis(self):
        async def body(s):
            f = str(FIX / "oom_fraction.pickle")
            w, _ = await call(s, "whatif", {"file": f, "alloc_confs": ["", "expandable_segments:True"]})
            self.assertEqual(w, cli_json("whatif", f, "--alloc-conf", "", "--alloc-conf", "expandable_segments:True"))
            self.assertTrue(w["replay_check"])

            p = FIX / "predict"
            recs = [{"file": str(p / f"convnet_batch.{n}.rec.pickle.xz"), "size": n} for n in (8, 16, 24)]
            pr, _ = await call(s, "predict", {"recordings": recs, "sizes": [160]})
            want = cli_json("predict", *[f"{r['file']}={r['size']}" for r in recs], "--size", "160")
            self.assertEqual(pr, want)
            truth = json.loads((p / "convnet_batch.160.json").read_text())
            got = pr["sizes"][0]["peak_reserved_bytes"]
            self.assertLess(abs(got - truth["peak_reserved_bytes"]) / truth["peak_reserved_bytes"], 0.15)

            a, b = str(FIX / "steady_train.pickle"), str(FIX / "leak_detached_cache.pickle")
            d, _ = await call(s, "diff", {"a": a, "b": b, "top": 10})
            want = cli_json("diff", a, b)  # the CLI's JSON lists 200 call sites
            for key in ["device_a", "device_b", "figures", "categories_at_peak"]:
                self.assertEqual(d["diff"][key], want[key], key)
            self.assertEqual(d["diff"]["sites_at_peak"], want["sites_at_peak"][:10])
            self.assertEqual(d["diff"]["leaks"], want["leaks"][:10])
            self.assertTrue(any("allocated" in x["name"] and x["bytes"] for x in d["diff"]["figures"]))

            h = FIX / "harness"
            ranks = [str(h / "ranks.rank0.pickle"), str(h / "ranks.rank1.oom.pickle")]
            r, _ = await call(s, "run", {"files": ranks})
            self.assertEqual(r["run"], cli_json("analyze", *ranks))
            self.assertTrue(r["ranks_from_names"])

        self.run_session(body)

    def test_bad_calls_get_errors_the_agent_can_act_on(self):
        async def body(s):
            with tempfile.TemporaryDirectory() as tmp:
                marker = Path(tmp) / "executed"
                # GLOBAL os.system, a string, REDUCE: what pickle.load would run.
                evil = Path(tmp) / "evil.pickle"
                evil.write_bytes(b"\x80\x02cos\nsystem\nX" + len(f"touch {marker}").to_bytes(4, "little")
                                 + f"touch {marker}".encode() + b"\x85R.")
                _, err = await call(s, "report", {"file": str(evil)})
                self.assertIn("GLOBAL", err)
                self.assertFalse(marker.exists(), "the pickle ran")
            _, err = await call(s, "report", {"file": str(FIX / "no_such.pickle")})
            self.assertIn("cannot open", err)
            _, err = await call(s, "report", {"file": str(FIX / "steady_train.pickle"), "bogus": 1})
            self.assertIn("unknown field", err)
            _, err = await call(s, "categories", {"file": str(FIX / "segments_only.pickle")})
            self.assertIn("allocation history", err)
            try:
                await s.call_tool("no_such_tool", {})
                self.fail("an unknown tool answered")
            except Exception as e:  # the SDK raises the JSON-RPC error
                note(f"call no_such_tool -> JSON-RPC error: {e}")
                self.assertIn("unknown tool", str(e))

        self.run_session(body)


if __name__ == "__main__":
    unittest.main()
