#!/usr/bin/env python3
"""Share of a CPU profile's samples that ran outside any split across cores.

  weft bench step --gpt 6,384,6,256 --batch 8 --precisions 32-true --cpuprofile step.prof
  bench/serial_share.py weft step.prof

A sample is in a split when its stack passes through tensor.parallelSplit or
the GEMM's arith.parallel (the caller's part) or a helper goroutine of
internal/par; building the model is left out. Prints the serial share s and
Amdahl's step time on two free cores, s + (1-s)/2 of one core's, and the
functions that ran serially most.
"""
import collections
import re
import subprocess
import sys

SPLITS = ("tensor.parallelSplit", "]).parallel", "par.help", "gemm.help", "tensor.hire.func")


def main():
    binary, profile = sys.argv[1:3]
    out = subprocess.run(["go", "tool", "pprof", "-traces", binary, profile],
                         capture_output=True, text=True, check=True).stdout
    total = inside = 0.0
    serial = collections.Counter()
    for block in out.split("-----------+-------------------------------------------------------")[1:]:
        lines = [l.strip() for l in block.strip().splitlines() if l.strip()]
        m = re.match(r"([\d.]+)(ms|s)\s+(.*)", lines[0]) if lines else None
        if not m:
            continue
        v = float(m.group(1)) * (1e-3 if m.group(2) == "ms" else 1)
        frames = [m.group(3)] + lines[1:]
        if any("nn.ParamInit" in f or "models.New" in f for f in frames):
            continue
        total += v
        if any(s in f for f in frames for s in SPLITS):
            inside += v
        else:
            leaf = next((f for f in frames if "weft/" in f), frames[0])
            serial[leaf.split("weft/")[-1]] += v
    s = (total - inside) / total
    print(f"{total:.1f}s of samples, {100 * s:.1f}% outside any split; "
          f"Amdahl on 2 free cores: {s + (1 - s) / 2:.3f} of one core's time")
    for name, v in serial.most_common(8):
        print(f"  {100 * v / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
