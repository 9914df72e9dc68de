"""Run fla's REAL Triton kernels on CPU through TRITON_INTERPRET=1 (an oracle, ~1000x slower than torch).

Usage: python interpret_run.py MODEL_DIR IDS.pt OUT.pt  — writes logits, decode logits and cache states.
Also: python interpret_run.py --ops OUT.pt  — the fused_recurrent ops on fixed random inputs;
python interpret_run.py --many ROOT OUT.pt  — every model folder under ROOT on ROOT/ids.pt (one import for many).
A hybrid's softmax blocks need flash-attn, which is not installed here: flash_attn_func below is written from
flash-attn's documented semantics (causal aligned bottom-right, window (left, right)), not taken from the project.
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


def flash_attn_func(q, k, v, causal=True, window_size=(-1, -1), **_):
    """Softmax attention over [B, T, H, D] q and [B, S, Hkv, D] k/v, one query position at a time."""
    T, S, H, Hkv = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    k, v = (x.float().repeat_interleave(H // Hkv, dim=2) for x in (k, v))
    out = []
    for t in range(T):
        i = t + S - T                                          # the query's position among the keys
        lo = 0 if window_size[0] < 0 else max(0, i - window_size[0])
        hi = i + 1 if causal else S
        scores = torch.einsum("bhd,bshd->bhs", q[:, t].float(), k[:, lo:hi]) / q.shape[-1] ** 0.5
        out.append(torch.einsum("bhs,bshd->bhd", scores.softmax(-1), v[:, lo:hi]))
    return torch.stack(out, 1).to(q.dtype)


def model_outputs(model, ids) -> dict:
    full, step_logits, cache = decoded(model, ids, ids.shape[1] - 2)
    n = len(model.model.layers)
    state = lambda c, i: c[i].get("recurrent_state") if isinstance(c[i], dict) else None   # noqa: E731
    return {"logits": full.logits,
            "states": [state(full.past_key_values, i) for i in range(n)],
            "decode_logits": step_logits,
            "decode_states": [state(cache, i) for i in range(n)]}


def run_model(model_dir, ids_path, out_path):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    torch.save(model_outputs(model, torch.load(ids_path, weights_only=True)), out_path)


def run_many(root, out_path):
    import time

    from transformers import AutoModelForCausalLM
    ids = torch.load(Path(root) / "ids.pt", weights_only=True)
    out = {}
    for folder in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        start = time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(folder).eval()
        out[folder.name] = {**model_outputs(model, ids), "seconds": time.perf_counter() - start}
    torch.save(out, out_path)


if __name__ == "__main__":
    import fla.layers.attn as _attn
    if _attn.flash_attn_func is None:
        _attn.flash_attn_func = flash_attn_func
    if sys.argv[1] == "--many":
        run_many(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "--ops":
        run_ops(sys.argv[2])
    else:
        run_model(*sys.argv[1:4])
