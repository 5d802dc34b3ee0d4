#!/usr/bin/env bash
# hsdp against fsdp on 2 simulated hosts × 2 ranks (bench/hosts.sh) whose
# links are limited to RATE (1gbit) each way, RUNS (5) times interleaved,
# printing medians: tokens/s of `weft train` (default gpt, 4 ranks, the
# median over a run's steps after the first 2) and the bytes a step moves
# between the hosts, read from host 1's veth counters (sent + received) in
# a run of STEPS (20) steps less those of a run of 5, over the steps
# between (what starting, evaluating and saving move cancels out), beside
# what the run's plan predicts (plan.json: what each rank sends to other
# hosts, times the 2 ranks of host 1, times 2 for what it receives).
# Every rank runs with GOMAXPROCS=${GOMAXPROCS:-1}. Needs root, Open MPI
# and python3.
#   bench/hosts.sh hsdp          (or RUNS=9 STEPS=30 bench/hosts-hsdp.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-5}
steps=${STEPS:-20}
short=5
rate=${RATE:-1gbit}
procs=${GOMAXPROCS:-1}
work=$(mktemp -d)
trap 'bench/hosts.sh down; rm -rf "$work"' EXIT
go build -o "$work/weft" ./cmd/weft
bench/hosts.sh up 2 --rate "$rate"

# link_bytes prints what host 1's link has sent and received.
link_bytes() {
	ip netns exec weft-h1 sh -c 'echo $(( $(cat /sys/class/net/eth0/statistics/tx_bytes) + $(cat /sys/class/net/eth0/statistics/rx_bytes) ))'
}

# train STRATEGY STEPS prints the bytes host 1's link moved in the run.
train() {
	local strategy=$1 n=$2 before
	rm -rf "$work/run"
	before=$(link_bytes)
	bench/hosts.sh mpirun -x GOMAXPROCS="$procs" -np 4 --map-by ppr:2:node \
		"$work/weft" train --strategy "$strategy" --devices 4 --comm mpi --steps "$n" --eval-every 1000 --save-every 1000 \
		--out "$work/run" >"$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
	echo $(($(link_bytes) - before))
}

for run in $(seq 1 "$runs"); do
	echo "run $run of $runs" >&2
	for strategy in fsdp hsdp; do
		few=$(train "$strategy" "$short")
		many=$(train "$strategy" "$steps")
		python3 -c 'import json, statistics, sys
m = [json.loads(l)["tokens_per_s"] for l in open(sys.argv[1] + "/metrics.jsonl")][2:]
p = json.load(open(sys.argv[1] + "/plan.json"))["traffic_per_step"]
print(json.dumps({"tokens_per_s": statistics.median(m), "bytes_per_step": (int(sys.argv[3]) - int(sys.argv[2])) / (int(sys.argv[5]) - int(sys.argv[4])),
                  "planned": 2 * p["ranks_per_host"] * p["between_hosts"]}))' "$work/run" "$few" "$many" "$short" "$steps" >>"$work/$strategy.jsonl"
	done
done

echo "$(date -u +%Y-%m-%d) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg); links $rate; $runs runs, GOMAXPROCS=$procs, medians"
python3 - "$work" <<'EOF2'
import json, statistics, sys
work, med = sys.argv[1], statistics.median
rows = {s: [json.loads(l) for l in open(f"{work}/{s}.jsonl")] for s in ("fsdp", "hsdp")}
print(f"{'default gpt, 2 hosts × 2 ranks':<32} {'tokens/s':>9} {'between hosts, KiB a step':>26} {'planned':>8}")
for s, rs in rows.items():
    print(f"{s:<32} {med(r['tokens_per_s'] for r in rs):>9.0f} {med(r['bytes_per_step'] for r in rs) / 1024:>26.1f} {rs[0]['planned'] / 1024:>8.1f}")
f, h = (med(r["bytes_per_step"] for r in rows[s]) for s in ("fsdp", "hsdp"))
t = [med(r["tokens_per_s"] for r in rows[s]) for s in ("fsdp", "hsdp")]
print(f"hsdp/fsdp: {t[1] / t[0]:.2f}x the tokens/s, {h / f:.2f}x the bytes between hosts")
EOF2
