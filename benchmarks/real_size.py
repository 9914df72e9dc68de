"""Random-init fla models with the real-size shapes of fla-hub's DeltaNet / Gated DeltaNet (built from the
config, nothing downloaded). Shared by the benchmarks; run as a script it saves one with `save_pretrained`
(safetensors), as a user's checkpoint would be, for the CLI:

    python benchmarks/real_size.py --shape 1.3B --family delta_net --out /tmp/deltanet-1.3b
    python -m analysis rank /tmp/deltanet-1.3b --tokens 1024 --stride 64
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FAMILIES = ("delta_net", "gated_deltanet", "mamba2")
# dk = dv = hidden / heads = 128 in both (fla-hub's 340M and 1.3B checkpoints); mamba2 (transformers' Mamba-2, the
# same hidden size and layer count): N = 128 (dk), head dim 64 (dv), expand 2, one group (as state-spaces' mamba2-370m)
SHAPES = {"340M": dict(hidden_size=1024, num_hidden_layers=24, num_heads=8),
          "1.3B": dict(hidden_size=2048, num_hidden_layers=24, num_heads=16)}
VOCAB = 32000


def build(family: str, shape: str = "340M", layers: int | None = None, vocab: int = VOCAB, seed: int = 0):
    """A random-init model (seeded; the global RNG is left as it was), float32, eval mode, on the CPU."""
    import analysis
    analysis.ready()  # the CPU path for fla's ops
    import torch
    from fla.models import DeltaNetConfig, GatedDeltaNetConfig
    from transformers import AutoModelForCausalLM
    dims = dict(SHAPES[shape], vocab_size=vocab)
    if layers is not None:
        dims["num_hidden_layers"] = layers
    head_dim = dims["hidden_size"] // dims["num_heads"]
    if family == "mamba2":
        from transformers.models.mamba2 import Mamba2Config
        hidden = dims["hidden_size"]
        config = Mamba2Config(hidden_size=hidden, num_hidden_layers=dims["num_hidden_layers"], vocab_size=vocab,
                              state_size=128, head_dim=64, expand=2, num_heads=2 * hidden // 64, n_groups=1,
                              chunk_size=256)
    else:
        config = DeltaNetConfig(**dims) if family == "delta_net" else \
            GatedDeltaNetConfig(**dims, head_dim=head_dim, expand_v=1.0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(config).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description="Save a random-init real-size fla model (safetensors).")
    parser.add_argument("--shape", choices=SHAPES, default="340M")
    parser.add_argument("--family", choices=FAMILIES, default="delta_net")
    parser.add_argument("--layers", type=int, help="fewer layers than the shape's 24 (a quick check)")
    parser.add_argument("--out", required=True, help="a new, empty directory")
    args = parser.parse_args()
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        sys.exit(f"{out} exists and is not empty; give a new directory.")
    model = build(args.family, args.shape, args.layers)
    model.save_pretrained(out, safe_serialization=True)
    params = sum(p.numel() for p in model.parameters())
    print(f"saved a random-init {args.family} ({args.shape} shape, {params / 1e6:.0f} M parameters) to {out}")


if __name__ == "__main__":
    main()
