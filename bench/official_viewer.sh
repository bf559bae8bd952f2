#!/usr/bin/env bash
# Assembles the official PyTorch memory viewer (what pytorch.org/memory_viz and
# torch.cuda._memory_viz serve) into DIR for the dashboard benchmark, which measures it in the
# same headless Chromium and run as memscope (server/tests/it/support/official_viewer.rs):
#
#     bench/official_viewer.sh /tmp/official-viewer [PYTORCH_REF]
#     MEMSCOPE_OFFICIAL_VIEWER=/tmp/official-viewer MEMSCOPE_BENCH_FILES=... \
#         cargo test --release -p server --test dashboard_bench -- --ignored --nocapture
#
# Needs network (raw.githubusercontent.com and the npm registry). The viewer's code is PyTorch's
# and is not kept in this repository. One change is made: its imports of d3 7 from a CDN become
# reads of the d3 7 bundle that the page loads with a script tag, so it runs offline.
set -euo pipefail
dir=${1:?usage: official_viewer.sh DIR [PYTORCH_REF]}
ref=${2:-main}
mkdir -p "$dir"
cd "$dir"
base=https://raw.githubusercontent.com/pytorch/pytorch/$ref/torch/utils/viz
curl -fsSL "$base/MemoryViz.js" -o MemoryViz.js
curl -fsSL "$base/process_alloc_data.js" -o process_alloc_data.js
npm pack --silent d3@7 >/dev/null
tar xzf d3-7.*.tgz package/dist/d3.min.js
mv package/dist/d3.min.js d3.min.js
rm -rf package d3-7.*.tgz
# import * as d3 from "https://cdn.jsdelivr.net/npm/d3@7/+esm";  → const d3 = window.d3;
# import {axisLeft} from "https://cdn.jsdelivr.net/npm/d3-axis@3/+esm"; → const {axisLeft} = window.d3;
sed -i -E \
    -e 's#^import \* as d3 from "https://[^"]*";#const d3 = window.d3;#' \
    -e 's#^import \{([^}]*)\} from "https://[^"]*";#const {\1} = window.d3;#' \
    MemoryViz.js
if grep -q 'https://cdn' MemoryViz.js; then
    echo "MemoryViz.js still imports from a CDN; adjust the rewrite above" >&2
    exit 1
fi
echo "official viewer in $dir: $(wc -c < MemoryViz.js) B MemoryViz.js, d3 $(head -c 40 d3.min.js | grep -o 'v[0-9.]*')"
