#!/usr/bin/env python3
"""Time the training steps `weft bench step` times, in PyTorch on the CPU.

The same models (mlp784, mlp, cnn, gpt), batch shapes and AdamW settings, in
float32 and in bfloat16 autocast; prints one JSON object like weft's:
{"step": [{"model": ..., "precision": "32-true"|"bf16-mixed", "ms": ...,
"threads": ...}]}, each the faster of PyTorch on 1 thread and on every core.
Run by compare.sh; needs Debian's python3-torch.
"""
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNorm(nn.LayerNorm):
    """LayerNorm in float32, as CUDA autocast runs it (PyTorch 1.13's CPU
    autocast leaves it to fail on bfloat16 inputs)."""

    def forward(self, x):
        return super().forward(x.float())


class MLP784(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.head = nn.Linear(784, 1024), nn.Linear(1024, 1024), nn.Linear(1024, 10)

    def forward(self, x):
        return self.head(F.relu(self.fc2(F.relu(self.fc1(x)))))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.norm, self.head = nn.Linear(32, 64), nn.Linear(64, 64), LayerNorm(64), nn.Linear(64, 10)

    def forward(self, x):
        return self.head(F.gelu(self.norm(self.fc2(F.gelu(self.fc1(x))))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.head = nn.Linear(576, 10)

    def forward(self, x):
        return self.head(F.relu(self.conv2(F.relu(self.conv1(x)))).flatten(1))


class Block(nn.Module):
    def __init__(self, c=32, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1, self.qkv, self.proj = LayerNorm(c), nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.ln2, self.fc, self.out = LayerNorm(c), nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(c // self.heads))
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(48, 32), nn.Embedding(16, 32)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.ln_f, self.head = LayerNorm(32), nn.Linear(32, 48, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x)).flatten(0, 1)


def batch(model):
    g = torch.Generator().manual_seed(7)
    if model == "mlp784":
        return torch.randn(64, 784, generator=g), torch.randint(0, 10, (64,), generator=g)
    if model == "mlp":
        return torch.randn(64, 32, generator=g), torch.randint(0, 10, (64,), generator=g)
    if model == "cnn":
        return torch.randn(32, 1, 12, 12, generator=g), torch.randint(0, 10, (32,), generator=g)
    return torch.randint(0, 48, (8, 16), generator=g), torch.randint(0, 48, (128,), generator=g)


def time_step(name, precision, steps):
    m = {"mlp784": MLP784, "mlp": MLP, "cnn": CNN, "gpt": GPT}[name]()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)
    x, y = batch(name)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
            logits = m(x)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) * 1e3 / steps


def best(name, precision, steps):
    """The fastest of 1 thread and one per core: on small VMs PyTorch's
    OpenMP threads can slow it down, so it gets whichever is faster."""
    runs = []
    for threads in sorted({1, os.cpu_count() or 1}):
        torch.set_num_threads(threads)
        runs.append((time_step(name, precision, steps), threads))
    ms, threads = min(runs)
    return {"model": name, "precision": precision, "ms": ms, "threads": threads}


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    out = [best(m, p, steps) for m in ("mlp784", "mlp", "cnn", "gpt") for p in ("32-true", "bf16-mixed")]
    json.dump({"torch": torch.__version__, "step": out}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
