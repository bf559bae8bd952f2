"""memscope's on-device harness: planted memory behaviours on a real GPU (scenarios.py), run with
the agent attached and verified against what the server finds (verify.py).
`python -m memscope_harness --help`."""


def load(out, name):
    """A run's ``NAME.json`` under `out`, or None when the run wrote none (it failed)."""
    import json
    import os
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def planted_line(path, name):
    """The line of `path` that ends with `# PLANT: name`: the truth names planted lines by marker,
    so it stays right when the code moves."""
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if line.rstrip().endswith("# PLANT: " + name):
                return i
    raise LookupError(name)
