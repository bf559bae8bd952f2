"""Agent overhead on a training step (issue 4 target: under 1%).

Runs one process, alternating phases of N steps: no agent, agent at 1 s, agent at 100 ms
(relay mode into a scratch folder, step() every step, segment summaries every 10 s / 1 s), three
rounds, and prints the mean step time of each phase and the overhead against the no-agent phases
of the same round. Also times memory_stats() and step() alone.

    python3 collectors/python/bench_agent.py [--steps 300]
"""

import argparse
import json
import statistics
import tempfile
import time

import torch

from memscope_agent import Agent, Settings


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.cuda.set_device(0)
    model = torch.nn.Sequential(*[m for _ in range(6) for m in (torch.nn.Linear(4096, 4096), torch.nn.GELU())]).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(1024, 4096, device="cuda")

    def run(agent):
        times = []
        for i in range(args.steps):
            t = time.perf_counter()
            if agent is not None:
                agent._guard("step", agent.set_step, i)
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        return statistics.fmean(times[10:])

    run(None)  # warm up
    results = {"none": [], "agent_1s": [], "agent_100ms": []}
    for r in range(args.rounds):
        results["none"].append(run(None))
        for name, interval, seg in (("agent_1s", 1.0, 10.0), ("agent_100ms", 0.1, 1.0)):
            d = tempfile.mkdtemp()
            a = Agent(Settings(agent_dir=d, interval_s=interval, segments_interval_s=seg)).start()
            results[name].append(run(a))
            a.stop()
    base = statistics.fmean(results["none"])
    out = {"steps_per_phase": args.steps, "rounds": args.rounds, "device": torch.cuda.get_device_name(0),
           "mean_step_ms": {k: statistics.fmean(v) * 1e3 for k, v in results.items()},
           "per_round_ms": {k: [round(x * 1e3, 3) for x in v] for k, v in results.items()}}
    out["overhead_percent"] = {k: (statistics.fmean(v) / base - 1) * 100 for k, v in results.items() if k != "none"}
    # The costs the agent adds, one by one.
    n = 2000
    t = time.perf_counter()
    for _ in range(n):
        torch.cuda.memory_stats(0)
    out["memory_stats_us"] = (time.perf_counter() - t) / n * 1e6
    a = Agent(Settings(agent_dir=tempfile.mkdtemp(), interval_s=3600))
    a._last_sample = time.monotonic()
    t = time.perf_counter()
    for i in range(n):
        a.set_step(i)
    out["step_call_us_between_samples"] = (time.perf_counter() - t) / n * 1e6
    t = time.perf_counter()
    for _ in range(50):
        a._summarise_segments()
    out["segment_summary_ms"] = (time.perf_counter() - t) / 50 * 1e3
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
