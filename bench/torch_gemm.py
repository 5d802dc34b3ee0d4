"""Time PyTorch's n×n×n matmul C = A·Bᵀ in float32 and bfloat16, as `weft
bench gemm` times weft's: each dtype in interleaved turns, the fastest turn
kept. Prints one JSON object: {"torch": version, "threads": t, "gemm":
[{"impl", "n", "gflops"}]}.
    python3 bench/torch_gemm.py N MIN_SECONDS
"""
import json
import sys
import time

import torch

n, min_time = int(sys.argv[1]), float(sys.argv[2])
turns = 5
ops = {}
for name, dt in (("torch-f32", torch.float32), ("torch-bf16", torch.bfloat16)):
    a, b = torch.randn(n, n).to(dt), torch.randn(n, n).to(dt)
    ops[name] = lambda a=a, b=b: torch.matmul(a, b.t())
    ops[name]()  # warm-up
best = dict.fromkeys(ops, float("inf"))
for _ in range(turns):
    for name, op in ops.items():
        start, reps = time.perf_counter(), 0
        while reps == 0 or time.perf_counter() - start < min_time / turns:
            op()
            reps += 1
        best[name] = min(best[name], (time.perf_counter() - start) / reps)
print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                  "gemm": [{"impl": k, "n": n, "gflops": 2 * n**3 / t / 1e9} for k, t in best.items()]}))
