"""Run fla's REAL Triton kernels on CPU through TRITON_INTERPRET=1 (an oracle, ~1000x slower than torch).

Usage: python interpret_run.py MODEL_DIR IDS.pt OUT.pt  — writes logits, decode logits and cache states.
Also: python interpret_run.py --ops OUT.pt  — the fused_recurrent ops on fixed random inputs.
Must run in its own process: the interpreter flag has to be set before triton is imported, and this
process must never import `analysis` (its CPU path would replace the kernels under test).
"""
import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"
import torch  # noqa: E402
import triton.runtime.autotuner as _autotuner  # noqa: E402

# The interpreter has no benchmarker: keep the first autotune config so nothing is benchmarked.
_prune = _autotuner.Autotuner.prune_configs
_autotuner.Autotuner.prune_configs = lambda self, kw, *a, **k: _prune(self, kw, *a, **k)[:1]

import fla  # noqa: E402,F401

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the shared decode loop (imports no analysis)
from family_cases import decoded  # noqa: E402


def run_ops(out_path):
    from fla.ops.delta_rule import fused_recurrent_delta_rule
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
    inputs = torch.load(out_path + ".in", weights_only=True)
    dn = fused_recurrent_delta_rule(**inputs["dn"])
    gdn = fused_recurrent_gated_delta_rule(**inputs["gdn"])
    torch.save({"dn": dn, "gdn": gdn}, out_path)


def run_model(model_dir, ids_path, out_path):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    ids = torch.load(ids_path, weights_only=True)
    full, step_logits, cache = decoded(model, ids, ids.shape[1] - 2)
    n = len(model.model.layers)
    torch.save({"logits": full.logits,
                "states": [full.past_key_values[i]["recurrent_state"] for i in range(n)],
                "decode_logits": step_logits,
                "decode_states": [cache[i]["recurrent_state"] for i in range(n)]}, out_path)


if __name__ == "__main__":
    if sys.argv[1] == "--ops":
        run_ops(sys.argv[2])
    else:
        run_model(*sys.argv[1:4])
