"""``python -m memscope_harness --server URL [--scenario NAME|all] [--verify]``

Runs each planted scenario in its own process with the agent attached (live statistics through
the host's collector with ``--agent-dir``, or straight to the server with ``--token``), each
uploading its snapshot(s) tagged ``scenario=NAME``; then, with ``--verify``, asks the server
whether it found what was planted and prints a table (exit status 1 on any failure).

``--verify-only`` checks an earlier run's ``--out`` folder; ``--fixtures DIR`` uploads the
snapshots kept in DIR and checks what can be checked without live data (CI does this).
"""

import argparse
import os
import subprocess
import sys
import time

from . import verify as v

HERE = os.path.dirname(os.path.abspath(__file__))
AGENT_DIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")

ORDER = ["steady", "leak_list", "leak_graph", "fragmentation", "oom_fragmentation", "expandable_segments",
         "side_stream", "outside_pytorch", "cuda_graph", "ranks"]


def gpu_count():
    import torch
    return torch.cuda.device_count()


def run_scenario(name, args, rank=None, world=1, local_rank=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(HERE), AGENT_DIR, env.get("PYTHONPATH", "")])
    env.update({"MEMSCOPE_SERVER": args.server, "MEMSCOPE_TAGS": "scenario=%s,harness=1" % name,
                "MEMSCOPE_INTERVAL_S": "0.2", "MEMSCOPE_SEGMENTS_INTERVAL_S": "1",
                "MEMSCOPE_SNAPSHOT_DIR": args.out, "MEMSCOPE_KEEP_SNAPSHOTS": "1", "MEMSCOPE_JOB": "harness"})
    if args.agent_dir:
        env["MEMSCOPE_AGENT_DIR"] = args.agent_dir
    elif args.token:
        env.update({"MEMSCOPE_TOKEN": args.token, "MEMSCOPE_NAME": args.name})
    if name == "expandable_segments":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    if rank is not None:
        env.update({"RANK": str(rank), "LOCAL_RANK": str(rank if local_rank is None else local_rank),
                    "WORLD_SIZE": str(world)})
        # The ranks of one job: the server makes a run of the snapshots that share it.
        env["MEMSCOPE_JOB"] = "harness-%s" % name
    return subprocess.Popen([sys.executable, "-m", "memscope_harness.scenarios", name, "--out", args.out],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def main():
    ap = argparse.ArgumentParser(prog="python -m memscope_harness", description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True, help="the memscope server, e.g. http://127.0.0.1:8080")
    ap.add_argument("--scenario", default="all", help="one of %s, or all" % ", ".join(ORDER))
    ap.add_argument("--out", default="./memscope-harness-out", help="truth files and snapshots go here")
    ap.add_argument("--agent-dir", help="relay live data through the collector watching this folder")
    ap.add_argument("--token", help="send live data straight to the server with this collector token")
    ap.add_argument("--name", default="harness", help="the token's collector name")
    ap.add_argument("--verify", action="store_true", help="check the server's findings after running")
    ap.add_argument("--verify-only", action="store_true", help="check an earlier run in --out")
    ap.add_argument("--fixtures", help="upload the snapshots kept in this folder and check them (no GPU)")
    args = ap.parse_args()
    server = v.Server(args.server)

    if args.fixtures:
        rows = v.verify(server, args.fixtures, live=False, uploaded=v.upload_fixtures(server, args.fixtures))
    else:
        args.out = os.path.abspath(args.out)
        os.makedirs(args.out, exist_ok=True)
        if not args.verify_only:
            if not args.agent_dir and not args.token:
                args.agent_dir = "/tmp/memscope-agent"
                print("live data: through the collector's folder %s (use --token to send to the server)"
                      % args.agent_dir, flush=True)
            names = ORDER if args.scenario == "all" else [args.scenario]
            for name in names:
                for old in os.listdir(args.out):
                    if old.startswith(name + "."):
                        os.remove(os.path.join(args.out, old))
                if name == "ranks":
                    gpus = gpu_count()
                    n = max(gpus, 2)
                    if gpus < 2:
                        # Two ranks still differ, and one still fails, on one GPU: each process
                        # has its own share of it (set_per_process_memory_fraction).
                        print("ranks: %d ranks share %d GPU" % (n, gpus), flush=True)
                    procs = [run_scenario(name, args, r, n, r % max(gpus, 1)) for r in range(n)]
                else:
                    procs = [run_scenario(name, args)]
                t = time.time()
                for p in procs:
                    out, _ = p.communicate(timeout=600)
                    status = "ok" if p.returncode == 0 else "FAILED (exit %d)" % p.returncode
                    print("%-20s %s in %.1f s" % (name, status, time.time() - t), flush=True)
                    if p.returncode != 0:
                        print(out[-3000:], flush=True)
            # The collector ships agent data in batches: give the last one time to arrive.
            if args.agent_dir and (args.verify or args.verify_only):
                time.sleep(6)
        if not (args.verify or args.verify_only):
            return 0
        rows = v.verify(server, args.out, live=True)
    print(v.table(rows), flush=True)
    failed = [r for r in rows if r["result"] == "FAIL"]
    print("%d checks: %d passed, %d failed, %d skipped" % (
        len(rows), sum(r["result"] == "pass" for r in rows), len(failed), sum(r["result"] == "skip" for r in rows)))
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
