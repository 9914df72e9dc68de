"""transformers' own torch path (the reference for the transformers families): fla and the project hidden.

Usage: python torch_path_run.py ROOT OUT.pt — every model folder under ROOT loaded with AutoModelForCausalLM, run on
ROOT/ids.pt: the no-cache logits, the full forward's cache, and a cached decode of the last two tokens after a prefill
(logits and the last cache), every cache tensor by its attribute path (family_cases.tf_flags.cache_tensors).

With fla unimportable transformers binds its pure-torch Gated DeltaNet / KDA recurrences, gated norms and convs;
mamba_ssm and causal_conv1d are not installed here, so the Mamba-2 mixers take transformers' torch SSD. Must run in
its own process: `analysis` would route those entry points to the project's CPU ops (the code under test).
"""
import sys
from pathlib import Path

sys.modules["fla"] = None            # transformers' is_flash_linear_attention_available() is then False
sys.modules["analysis"] = None       # the project is not here
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the shared decode loop (imports no analysis)
from family_cases.tf_flags import cache_tensors, decoded  # noqa: E402


def outputs(model, ids) -> dict:
    with torch.no_grad():
        plain = model(ids, use_cache=False).logits
    full, steps, cache = decoded(model, ids, ids.shape[1] - 2)
    return {"logits": plain, "cached_logits": full.logits, "states": cache_tensors(full.past_key_values),
            "decode_logits": steps, "decode_states": cache_tensors(cache),
            "module": type(model).__module__}


def main(root: str, out_path: str) -> None:
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(1)
    ids = torch.load(Path(root) / "ids.pt", weights_only=True)
    out = {}
    for folder in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        model = AutoModelForCausalLM.from_pretrained(folder).float().eval()
        out[folder.name] = outputs(model, ids)
    torch.save(out, out_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
