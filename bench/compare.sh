#!/usr/bin/env bash
# Time the same training steps in PyTorch (CPU) and weft in one run and print
# weft's speed-up per model and precision (>1: weft is faster).
#   bench/compare.sh                       # the reference models, then the gpt sizes
#   REFERENCE=0 SIZES="6,384,6,256:8" GPT_STEPS=10 bench/compare.sh
# SIZES lists gpt sizes as layers,width,heads,context:batch (default the
# three of issue 17); each size and precision runs in fresh processes, weft
# then PyTorch on 1 and on every core (OPENBLAS_NUM_THREADS and
# OMP_NUM_THREADS set to match, the faster kept), so peak RSS is the step's.
# Needs Debian's python3-torch (apt-get install -y python3-torch).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${STEPS:-20}
gpt_steps=${GPT_STEPS:-5}
sizes=${SIZES-"4,128,4,64:12 6,384,6,256:8 12,768,12,256:4"}
precisions=${PRECISIONS:-"32-true bf16-mixed"}
py=${PYTHON:-/usr/bin/python3} # Debian's, which has python3-torch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/weft" ./cmd/weft
grep -m1 '^model name' /proc/cpuinfo || true
# Debian's python3-torch runs its GEMMs on whichever libblas.so.3 is selected:
# OpenBLAS (libopenblas0) or the far slower reference BLAS (libblas3).
echo "PyTorch's BLAS: $(readlink -f /etc/alternatives/libblas.so.3-x86_64-linux-gnu 2>/dev/null || echo unknown)"
echo "CPU flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16|amx_tile)$' | tr '\n' ' ')"
if [ "${REFERENCE:-1}" != 0 ]; then
	torch=$("$py" bench/torch_step.py "$steps")
	weft=$("$work/weft" bench step --steps "$steps" --json)
	"$py" - "$torch" "$weft" <<'PY'
import json, sys
torch, weft = (json.loads(a) for a in sys.argv[1:3])
t = {(r["model"], r["precision"]): r["ms"] for r in torch["step"]}
threads = {(r["model"], r["precision"]): r["threads"] for r in torch["step"]}
print(f"PyTorch {torch['torch']} (its faster thread count) vs weft, median ms per step")
print(f"{'model':8} {'precision':11} {'torch':>9} {'threads':>8} {'weft':>9} {'speed-up':>9} {'weft allocs':>12}")
for r in weft["step"]:
    k = (r["model"], r["precision"])
    print(f"{k[0]:8} {k[1]:11} {t[k]:9.2f} {threads[k]:8} {r['ms']:9.2f} {t[k] / r['ms']:8.2f}x {r['allocs']:12.0f}")
PY
fi
[ -n "$sizes" ] || exit 0
cores=$(nproc)
echo
echo "gpt sizes (layers,width,heads,context), median ms per step; PyTorch at its faster thread count"
printf '%-14s %5s %7s %-11s %9s %9s %3s %10s %8s %7s %5s %9s %18s\n' gpt batch params precision weft torch thr torch/weft \
	GFLOP/s 'of GEMM' cores 'alloc MiB' 'RSS MiB weft/torch'
for size in $sizes; do
	gpt=${size%%:*} batch=${size##*:}
	for p in $precisions; do
		w=$("$work/weft" bench step --gpt "$gpt" --batch "$batch" --precisions "$p" --steps "$gpt_steps" --json)
		ts=()
		for threads in $(printf '%s\n' 1 "$cores" | sort -un); do
			ts+=("$(OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads "$py" bench/torch_step.py "$gpt_steps" --gpt "$gpt" --batch "$batch" --precision "$p")")
		done
		# One row as soon as its size and precision are measured.
		"$py" - "$gpt" "$w" "${ts[@]}" <<'PY'
import json, sys
gpt, w, *ts = sys.argv[1:]
w = json.loads(w)
peak = next(g["gflops"] for g in w["gemm"] if g["impl"] == "weft-f32")
w = w["step"][0]
t = min((json.loads(x)["step"][0] for x in ts), key=lambda r: r["ms"])
assert t["params"] == w["params"], f"gpt {gpt}: PyTorch has {t['params']} parameters, weft {w['params']}"
print(f"{gpt:14} {w['batch']:5} {w['params'] / 1e6:6.2f}M {w['precision']:11} {w['ms']:9.1f} {t['ms']:9.1f} {t['threads']:3} "
      f"{t['ms'] / w['ms']:9.2f}x {w['gflops']:8.1f} {100 * w['of_gemm_peak']:6.0f}% {w['cores_busy']:5.2f} "
      f"{w['peak_alloc'] / 2**20:9.0f} {w['peak_rss'] / 2**20:8.0f} / {t['peak_rss'] / 2**20:.0f}   (f32 GEMM {peak:.0f} GFLOP/s)")
PY
	done
done
