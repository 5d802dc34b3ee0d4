#!/usr/bin/env bash
# Training and all-reduce across 2 simulated hosts (bench/hosts.sh), beside
# the same ranks on one host, over the same transport (--mca btl tcp,self
# on the hosts' addresses), RUNS (5) times interleaved, printing medians:
#   - tokens/s of `weft train` (default gpt, fsdp, 2 ranks, STEPS (20)
#     steps, the median over a run's steps after the first 2): one rank per
#     host, and both ranks on host 1;
#   - the time of a float32 all-reduce between the 2 hosts, 4 KiB to
#     64 MiB: weft (`weft bench allreduce --comm mpi`) and a C program
#     calling MPI_Allreduce (bench/allreduce.c, built here with mpicc).
# Every rank runs with GOMAXPROCS=${GOMAXPROCS:-1}, so both layouts get the
# same threads. Needs root, Open MPI (mpicc) and python3.
#   bench/hosts.sh bench          (or RUNS=9 STEPS=30 bench/hosts-bench.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-5}
steps=${STEPS:-20}
procs=${GOMAXPROCS:-1}
work=$(mktemp -d)
trap 'bench/hosts.sh down; rm -rf "$work"' EXIT
go build -o "$work/weft" ./cmd/weft
mpicc -O2 -o "$work/allreduce" bench/allreduce.c
bench/hosts.sh up 2

# train LAYOUT appends the median tokens/s of one run to $work/LAYOUT.
train() {
	local per_host=$1 layout=$2
	rm -rf "$work/run"
	bench/hosts.sh mpirun -x GOMAXPROCS="$procs" -np 2 --map-by "ppr:$per_host:node" \
		"$work/weft" train --strategy fsdp --devices 2 --comm mpi --steps "$steps" --out "$work/run" >"$work/log" 2>&1 ||
		{ cat "$work/log" >&2; exit 1; }
	python3 -c 'import json, statistics, sys
m = [json.loads(l)["tokens_per_s"] for l in open(sys.argv[1])][2:]
print(statistics.median(m))' "$work/run/metrics.jsonl" >>"$work/$layout"
}

for run in $(seq 1 "$runs"); do
	echo "run $run of $runs" >&2
	train 1 across
	train 2 one
	bench/hosts.sh mpirun -np 2 --map-by ppr:1:node "$work/allreduce" >>"$work/c.jsonl"
	bench/hosts.sh mpirun -x GOMAXPROCS="$procs" -np 2 --map-by ppr:1:node \
		"$work/weft" bench allreduce --comm mpi --json >>"$work/weft.jsonl"
done

echo "$(date -u +%Y-%m-%d) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg); $runs runs, GOMAXPROCS=$procs, medians"
python3 - "$work" <<'EOF'
import json, statistics, sys
work = sys.argv[1]
med = statistics.median
def col(name): return [float(l) for l in open(f"{work}/{name}")]
across, one = col("across"), col("one")
print(f"fsdp, default gpt, 2 ranks: 1 per host {med(across):.0f} tokens/s, both on one host {med(one):.0f} tokens/s: {med(across) / med(one):.2f}x")
c, weft = {}, {}
for l in open(f"{work}/c.jsonl"):
    r = json.loads(l); c.setdefault(r["bytes"], []).append(r["us"])
for l in open(f"{work}/weft.jsonl"):
    for r in json.loads(l)["allreduce"]: weft.setdefault(r["bytes"], []).append(r["us"])
print(f"{'all-reduce':>12} {'C µs':>10} {'weft µs':>10} {'weft/C':>7}")
for b in sorted(c):
    print(f"{b >> 10:>8} KiB {med(c[b]):>10.1f} {med(weft[b]):>10.1f} {med(weft[b]) / med(c[b]):>7.2f}")
EOF
