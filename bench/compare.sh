#!/usr/bin/env bash
# Time the same training steps in PyTorch (CPU) and weft in one run and print
# weft's speed-up per model and precision (>1: weft is faster).
#   bench/compare.sh                       # the reference models, then the gpt sizes
#   REFERENCE=0 SIZES="6,384,6,256:8" GPT_STEPS=10 bench/compare.sh
#   REFERENCE=0 SIZES= GEMM_N=1024 bench/compare.sh   # the GEMMs alone
# GEMM_N (default 1024; empty skips it) first times the n×n×n GEMMs of
# `weft bench gemm` beside PyTorch's float32 and bfloat16 matmul, REPEATS
# processes of each, interleaved, each impl's fastest kept.
# SIZES lists gpt sizes as layers,width,heads,context:batch (default the
# three of issue 17); each size and precision runs in fresh processes, weft
# then PyTorch on 1 and on every core (OPENBLAS_NUM_THREADS and
# OMP_NUM_THREADS set to match), so peak RSS is the step's. That round runs
# REPEATS times (default 2), interleaved, and each side keeps its fastest
# process: on a shared machine a neighbour slows a whole process, not a
# step. The last lines give the ratios of the kept times.
# Needs Debian's python3-torch (apt-get install -y python3-torch).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${STEPS:-20}
gpt_steps=${GPT_STEPS:-5}
sizes=${SIZES-"4,128,4,64:12 6,384,6,256:8 12,768,12,256:4"}
precisions=${PRECISIONS:-"32-true bf16-mixed"}
repeats=${REPEATS:-2}
[[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: REPEATS=$repeats: want a whole number of rounds, at least 1" >&2; exit 2; }
py=${PYTHON:-/usr/bin/python3} # Debian's, which has python3-torch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/weft" ./cmd/weft
grep -m1 '^model name' /proc/cpuinfo || true
# Debian's python3-torch runs its GEMMs on whichever libblas.so.3 is selected:
# OpenBLAS (libopenblas0) or the far slower reference BLAS (libblas3).
echo "PyTorch's BLAS: $(readlink -f /etc/alternatives/libblas.so.3-x86_64-linux-gnu 2>/dev/null || echo unknown)"
echo "CPU flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16|amx_tile)$' | tr '\n' ' ')"
gemm_n=${GEMM_N-1024}
if [ -n "$gemm_n" ]; then
	gs=()
	for _ in $(seq "$repeats"); do
		gs+=("$("$work/weft" bench gemm --sizes "$gemm_n" --min-time 2s --json 2>/dev/null)")
		gs+=("$("$py" bench/torch_gemm.py "$gemm_n" 2)")
	done
	"$py" - "${gs[@]}" <<'PY'
import json, sys
best = {}
for run in sys.argv[1:]:
    for g in json.loads(run)["gemm"]:
        best[g["impl"]] = max(best.get(g["impl"], 0), g["gflops"])
f32 = best["weft-f32"]
print(f"GEMM n={json.loads(sys.argv[1])['gemm'][0]['n']}, GFLOP/s (fastest of each), and of weft-f32")
for impl, gf in best.items():
    print(f"{impl:16} {gf:8.1f} {gf / f32:6.2f}")
if "torch-bf16" in best:
    print(f"weft-bf16 / torch-bf16: {best['weft-bf16'] / best['torch-bf16']:.2f}")
PY
	echo
fi
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
		ws=() ts=()
		for _ in $(seq "$repeats"); do
			ws+=("$("$work/weft" bench step --gpt "$gpt" --batch "$batch" --precisions "$p" --steps "$gpt_steps" --json)")
			for threads in $(printf '%s\n' 1 "$cores" | sort -un); do
				ts+=("$(OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads "$py" bench/torch_step.py "$gpt_steps" --gpt "$gpt" --batch "$batch" --precision "$p")")
			done
		done
		# One row as soon as its size and precision are measured.
		"$py" - "$gpt" "$work/kept" "${#ws[@]}" "${ws[@]}" "${ts[@]}" <<'PY'
import json, sys
gpt, kept, n, *runs = sys.argv[1:]
ws, ts = [json.loads(x) for x in runs[:int(n)]], [json.loads(x)["step"][0] for x in runs[int(n):]]
w = min(ws, key=lambda r: r["step"][0]["ms"])
peak = next(g["gflops"] for g in w["gemm"] if g["impl"] == "weft-f32")
w = w["step"][0]
t = min(ts, key=lambda r: r["ms"])
assert t["params"] == w["params"], f"gpt {gpt}: PyTorch has {t['params']} parameters, weft {w['params']}"
print(f"{gpt:14} {w['batch']:5} {w['params'] / 1e6:6.2f}M {w['precision']:11} {w['ms']:9.1f} {t['ms']:9.1f} {t['threads']:3} "
      f"{t['ms'] / w['ms']:9.2f}x {w['gflops']:8.1f} {100 * w['of_gemm_peak']:6.0f}% {w['cores_busy']:5.2f} "
      f"{w['peak_alloc'] / 2**20:9.0f} {w['peak_rss'] / 2**20:8.0f} / {t['peak_rss'] / 2**20:.0f}   (f32 GEMM {peak:.0f} GFLOP/s)")
with open(kept, "a") as f:
    print(gpt, w["batch"], w["precision"], w["ms"], t["ms"], file=f)
PY
	done
done
[ -s "$work/kept" ] || exit 0
"$py" - "$work/kept" <<'PY'
import sys
ms = {}
for line in open(sys.argv[1]):
    gpt, batch, p, w, t = line.split()
    ms[gpt, batch, p] = float(w), float(t)
print()
print(f"{'gpt':14} {'batch':>5} {'weft bf16-mixed / 32-true':>26} {'torch/weft 32-true':>19} {'torch/weft bf16-mixed':>22}")
for gpt, batch in dict.fromkeys((g, b) for g, b, _ in ms):
    f32, bf16 = ms.get((gpt, batch, "32-true")), ms.get((gpt, batch, "bf16-mixed"))
    cell = lambda r: f"{r[1] / r[0]:.2f}" if r else "-"
    print(f"{gpt:14} {batch:>5} {bf16[0] / f32[0] if f32 and bf16 else float('nan'):26.2f} {cell(f32):>19} {cell(bf16):>22}")
PY
