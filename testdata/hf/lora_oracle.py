"""PyTorch oracle for LoRA adapters in PEFT's layout (weft export --format
peft), without the peft library: it reads adapter_config.json and
adapter_model.safetensors, loads the base model named by
base_model_name_or_path (an HF folder: config.json + model.safetensors),
adds each adapter to the weight it adapts as PEFT merges it,

    W += (lora_alpha / r) · B · A          (B [out, r], A [r, in])
    W += ((lora_alpha / r) · B · A)ᵀ       with fan_in_fan_out (GPT-2's Conv1D, W [in, out])

and runs the model forward with oracle.py's plain-torch GPT-2 and Llama.

  lora_oracle.py peft ADAPTERS IN OUT [, peft|run ... ]
      the adapted model on the tokens of IN -> OUT (tokens and logits)
  lora_oracle.py run DIR IN OUT [, peft|run ...]
      oracle.py's run: the model in DIR (config.json + model.safetensors)

A "," separates jobs, so that one start of Python (and of torch, which
takes seconds) serves them all.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle import FORWARD, read_safetensors, run_job, write_safetensors  # noqa: E402

PREFIX = "base_model.model."


def adapted_weights(adapters):
    with open(os.path.join(adapters, "adapter_config.json")) as f:
        peft = json.load(f)
    if peft["peft_type"] != "LORA":
        sys.exit(f"{adapters}: peft_type {peft['peft_type']}, want LORA")
    base = peft["base_model_name_or_path"]
    with open(os.path.join(base, "config.json")) as f:
        cfg = json.load(f)
    w = {k: t.double() for k, t in read_safetensors(os.path.join(base, "model.safetensors")).items()}
    lora = read_safetensors(os.path.join(adapters, "adapter_model.safetensors"))
    scale = peft["lora_alpha"] / peft["r"]
    merged = 0
    for key in lora:
        if not key.endswith(".lora_A.weight"):
            continue
        module = key[len(PREFIX) : -len(".lora_A.weight")]
        if not any(module == t or module.endswith("." + t) for t in peft["target_modules"]):
            sys.exit(f"{adapters}: {module} is not among target_modules {peft['target_modules']}")
        a, b = lora[key].double(), lora[PREFIX + module + ".lora_B.weight"].double()
        delta = scale * (b @ a)  # [out, in]
        w[module + ".weight"] += delta.T if peft.get("fan_in_fan_out", False) else delta
        merged += 1
    if merged != len(peft["target_modules"]) or 2 * merged != len(lora):
        sys.exit(f"{adapters}: {len(lora)} adapter tensors for {len(peft['target_modules'])} target modules")
    return cfg, {k: t.float() for k, t in w.items()}


def main(argv):
    if not argv:
        sys.exit(__doc__)
    torch.set_grad_enabled(False)
    job = []
    for a in argv + [","]:
        if a != ",":
            job.append(a)
            continue
        if job[0] == "peft" and len(job) == 4:
            cfg, w = adapted_weights(job[1])
            ids = read_safetensors(job[2])["tokens"]
            write_safetensors(job[3], {"tokens": ids, "logits": FORWARD[cfg["model_type"]](cfg, w, ids)})
        else:
            run_job(job[0], job[1:])
        job = []


if __name__ == "__main__":
    main(sys.argv[1:])
