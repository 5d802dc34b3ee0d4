#!/usr/bin/env bash
# Peak memory per rank of `weft train` under mpirun, for every strategy and
# precision: the allocator's high-water mark (tensor.Memory's Peak) and the
# kernel's resident one (VmHWM), each the largest over the job's ranks, as
# the run's own summary line reports them, beside the plan's prediction of
# the allocator's (fabric.Plan.Peak). Cells are "alloc / predicted (error)
# / RSS" in MiB; the last line of each block is the process floor (a tiny
# model).
#   NP="2 4" STRATEGIES="ddp fsdp" PRECISIONS="32-true" bench/memory.sh
# CHECKPOINT='blocks.*' adds --activation-checkpointing; STEPS sets the steps.
# The default model is the gpt of the FSDP memory issue: 8 layers, width
# 512, 8 heads, context 64 (25.35M parameters), batch 8, 3 steps.
set -euo pipefail
cd "$(dirname "$0")/.."
np_list=${NP:-"2 4"}
strategies=${STRATEGIES:-"ddp zero1 zero2 fsdp"}
precisions=${PRECISIONS:-"32-true bf16-true transformer-engine bf16-true+nf4-dq"}
gpt=${GPT:-"{layers: 8, width: 512, heads: 8, context: 64}"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/weft" ./cmd/weft
config() { # model size, batch size, steps
	printf 'model: gpt\ngpt: %s\nbatch_size: %s\nsteps: %s\neval_every: 1000\neval_batches: 1\nsave_every: 1000\n' "$1" "$2" "$3"
}
config "$gpt" "${BATCH:-8}" "${STEPS:-3}" >"$work/model.yaml"
config "{layers: 1, width: 16, heads: 2, context: 8}" 4 3 >"$work/tiny.yaml"
checkpoint=()
[ -n "${CHECKPOINT:-}" ] && checkpoint=(--activation-checkpointing "$CHECKPOINT")
# peak CONFIG NP STRATEGY PRECISION prints "alloc / RSS", each the ranks' largest.
peak() {
	rm -rf "$work/run"
	line=$(mpirun --oversubscribe -np "$2" "$work/weft" train --config "$1" --devices "$2" --comm mpi \
		--strategy "$3" --precision "$4" --out "$work/run" "${checkpoint[@]}" 2>&1 | grep -aoE 'peak( per rank)?: .*' | sed 's/peak per rank:/peak:/' || true)
	if [ -z "$line" ]; then
		echo "failed"
		return
	fi
	echo "$line" | awk '{ split($3, a, "/"); split($6, p, "/"); split($9, r, "/"); ma = 0; mp = 0; mr = 0
		for (i in a) if (a[i] + 0 > ma) ma = a[i] + 0
		for (i in p) if (p[i] + 0 > mp) mp = p[i] + 0
		for (i in r) if (r[i] + 0 > mr) mr = r[i] + 0
		printf "%.0f / %.0f (%+.0f%%) / %.0f", ma, mp, 100 * (mp - ma) / (ma > 0 ? ma : 1), mr }'
}
for np in $np_list; do
	echo
	echo "mpirun -np $np, peak per rank in MiB (allocator / predicted (error) / RSS)"
	printf '| strategy |'
	for p in $precisions; do printf ' %s |' "$p"; done
	printf '\n| --- |'
	for p in $precisions; do printf ' --- |'; done
	echo
	for s in $strategies; do
		printf '| %s |' "$s"
		for p in $precisions; do printf ' %s |' "$(peak "$work/model.yaml" "$np" "$s" "$p")"; done
		echo
	done
	printf '| floor (tiny gpt, fsdp, 32-true) | %s |\n' "$(peak "$work/tiny.yaml" "$np" fsdp 32-true)"
done
