"""A small training loop with memscope's agent attached, used by the on-GPU end-to-end run
(collectors/device-e2e.sh) and as an example.

    MEMSCOPE_AGENT_DIR=/tmp/memscope-agent MEMSCOPE_SERVER=http://127.0.0.1:8080 \
        python3 train_with_agent.py --steps 120 --leak-mib 4 --oom

--leak-mib N keeps N MiB more every step (a list of tensors that is never cleared), so the live
leak signal has something to find; --oom then asks for more memory than the process may use
(set_per_process_memory_fraction), which fires the agent's OOM observer; the job catches the
error, as many do, and carries on for a few steps.
"""

import argparse
import time

import torch

import memscope_agent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--leak-mib", type=int, default=4)
    ap.add_argument("--oom", action="store_true")
    ap.add_argument("--step-sleep-s", type=float, default=0.1)
    ap.add_argument("--no-agent", action="store_true")
    args = ap.parse_args()

    torch.cuda.set_device(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096), torch.nn.GELU(),
        torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if not args.no_agent:
        memscope_agent.start()
    kept = []
    for step in range(args.steps):
        memscope_agent.step(step)
        x = torch.randn(256, 4096, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if args.leak_mib:
            kept.append(torch.empty(args.leak_mib << 20, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
        time.sleep(args.step_sleep_s)
        if args.oom and step == args.steps - 10:
            total = torch.cuda.get_device_properties(0).total_memory
            torch.cuda.set_per_process_memory_fraction(0.05)
            try:
                torch.empty(int(total * 0.06), dtype=torch.uint8, device="cuda")
            except torch.OutOfMemoryError as e:
                print("caught the induced OOM:", str(e).splitlines()[0], flush=True)
            torch.cuda.set_per_process_memory_fraction(1.0)
    memscope_agent.stop()
    print("trained", args.steps, "steps; pid", __import__("os").getpid(), flush=True)


if __name__ == "__main__":
    main()
