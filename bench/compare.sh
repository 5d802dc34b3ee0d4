#!/usr/bin/env bash
# Time the same training steps in PyTorch (CPU) and weft in one run and print
# weft's speed-up per model and precision (>1: weft is faster).
# Needs Debian's python3-torch (apt-get install -y python3-torch).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${STEPS:-20}
py=${PYTHON:-/usr/bin/python3} # Debian's, which has python3-torch
torch=$("$py" bench/torch_step.py "$steps")
weft=$(go run ./cmd/weft bench step --steps "$steps" --json)
"$py" - "$torch" "$weft" <<'PY'
import json, sys
torch, weft = (json.loads(a) for a in sys.argv[1:3])
t = {(r["model"], r["precision"]): r["ms"] for r in torch["step"]}
threads = {(r["model"], r["precision"]): r["threads"] for r in torch["step"]}
print(f"PyTorch {torch['torch']} (its faster thread count) vs weft, ms per step")
print(f"{'model':8} {'precision':11} {'torch':>9} {'threads':>8} {'weft':>9} {'speed-up':>9} {'weft allocs':>12}")
for r in weft["step"]:
    k = (r["model"], r["precision"])
    print(f"{k[0]:8} {k[1]:11} {t[k]:9.2f} {threads[k]:8} {r['ms']:9.2f} {t[k] / r['ms']:8.2f}x {r['allocs']:12.0f}")
PY
