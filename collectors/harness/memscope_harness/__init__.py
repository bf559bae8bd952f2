"""memscope's on-device harness: planted memory behaviours on a real GPU (scenarios.py), run with
the agent attached and verified against what the server finds (verify.py).
`python -m memscope_harness --help`."""
