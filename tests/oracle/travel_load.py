"""Load saved pruned folders as a user WITHOUT the project would: `analysis` cannot be imported, the working
directory is outside the checkout, AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).

Usage: python travel_load.py JOBS.json — each job {"folder", "ids", "out", "new_tokens", "use_cache"}: writes the
no-cache logits of `ids` and the greedy continuation of `ids[:1]` to `out` (torch.save, tensors only).
Env: HIDE_FLA=1 hides fla (transformers families on transformers' torch path); TRITON_INTERPRET=1 runs fla's
real Triton kernels on the CPU (the interpreter has no benchmarker: autotuning keeps its first config).
"""
import json
import os
import sys

sys.modules["analysis"] = None            # the project is not installed here
if os.environ.get("HIDE_FLA") == "1":
    sys.modules["fla"] = None
import torch  # noqa: E402

if os.environ.get("TRITON_INTERPRET") == "1":
    import triton.runtime.autotuner as _autotuner
    _prune = _autotuner.Autotuner.prune_configs
    _autotuner.Autotuner.prune_configs = lambda self, kw, *a, **k: _prune(self, kw, *a, **k)[:1]

from transformers import AutoModelForCausalLM  # noqa: E402


def run(job):
    model = AutoModelForCausalLM.from_pretrained(job["folder"], trust_remote_code=True).eval()
    ids = torch.load(job["ids"], weights_only=True)
    with torch.no_grad():
        logits = model(ids, use_cache=False).logits
        generated = model.generate(ids[:1], max_new_tokens=job["new_tokens"], do_sample=False,
                                   use_cache=job["use_cache"], pad_token_id=0)
    torch.save({"logits": logits, "generated": generated}, job["out"])
    print(job["folder"], type(model).__module__, flush=True)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        for job in json.load(f):
            run(job)
