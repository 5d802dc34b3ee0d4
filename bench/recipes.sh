#!/usr/bin/env bash
# Trains the default gpt (300 steps) under each precision recipe and draws
# their loss curves into one plot beside bf16-mixed's, with each run's final
# losses relative to it:
#   bench/recipes.sh [OUT.png]      (default docs/recipes.png; runs in a temporary folder)
set -euo pipefail
cd "$(dirname "$0")/.."
png=${1:-docs/recipes.png}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/weft" ./cmd/weft
recipes=(bf16-mixed bf16-mixed+fp8 bf16-mixed+fp8-current bf16-mixed+fp8-mx bf16-mixed+fp8-block bf16-mixed+fp8-rowwise
	bf16-mixed+fp8-rowwise-gw-hp bf16-mixed+mxfp4 bf16-mixed+nvfp4 bf16-mixed+adamw8bit
	bf16-mixed+adamw4bit bf16-mixed+adamwfp8
	'bf16-true(stochastic_round=true)' bf16-true)
runs=()
for spec in "${recipes[@]}"; do
	echo "training $spec" >&2
	out="$work/$spec"
	"$work/weft" train --precision "$spec" --out "$out" >"$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
	runs+=("$out")
done
"$work/weft" compare "${runs[@]}" --png "$png" | sed "s|$work/||"
