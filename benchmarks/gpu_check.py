"""One short GPU session: fla's Triton path vs our CPU path, pruned models on fla kernels, latency vs dk.

Run on a CUDA machine: `python benchmarks/gpu_check.py` (a few minutes). Prints one line per check.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import analysis  # noqa: E402

analysis.ready()  # the CPU path for fla's ops and the project's model types
from analysis import data, models  # noqa: E402
from analysis.calibration import calibrate  # noqa: E402
from analysis.latency import kernel_latency  # noqa: E402
from analysis.prune import plan_key_dims, prune  # noqa: E402


def rel(a, b):
    return float((a.float() - b.float()).abs().max() / b.float().abs().max())


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: this check needs a GPU")
    print("device:", torch.cuda.get_device_name(0))
    for name in ("deltanet-small", "gated-deltanet-small"):
        cpu = models.load_model(name, device="cpu")
        tok = models.load_tokenizer(cpu)
        ids = data.token_windows(data.encode(data.load_text("test"), tok), 256, max_windows=4)
        for dtype in (torch.bfloat16, torch.float32):
            if dtype == torch.float32 and name == "deltanet-small":
                continue  # fla's DeltaNet chunk kernel refuses fp32
            gpu = models.load_model(name, device="cuda", dtype=dtype)
            with torch.no_grad():
                a = gpu(ids.cuda(), use_cache=True)
                b = cpu(ids, use_cache=True)
            state = rel(a.past_key_values[0]["recurrent_state"].cpu(), b.past_key_values[0]["recurrent_state"])
            print(f"{name} {dtype}: logits rel diff {rel(a.logits.cpu(), b.logits):.2e}, layer-0 state {state:.2e}")
        calib = calibrate(cpu, tok, n_sequences=8)
        for strategy in ("drrqr", "wanda"):
            for ratios in ([0.5] * 4, [0.25, 0.5, 0.75, 0.5]):
                pruned = prune(cpu, strategy, plan_key_dims(cpu, ratios=ratios), calib).model
                on_gpu = pruned.to("cuda", torch.bfloat16)
                with torch.no_grad():
                    out = on_gpu(ids.cuda()).logits.float().cpu()
                    ref = pruned.to("cpu", torch.float32)(ids).logits
                print(f"  pruned {strategy} {ratios}: fla kernels finite={bool(torch.isfinite(out).all())}, "
                      f"rel diff vs CPU {rel(out, ref):.2e}")
    for gated in (False, True):
        for p in kernel_latency([16, 32, 64, 96, 128, 192, 256], batch=8, tokens=4096, heads=16, value_dim=128,
                                device="cuda", gated=gated):
            print(f"latency {p['op']} dk {p['key_dim']:3d} tiles {p['tiles']}: {p['ms']:.3f} ms "
                  f"({p['dtype']}, B{p['batch']} T{p['tokens']} H{p['heads']} dv{p['value_dim']}, {p['timer']})")


if __name__ == "__main__":
    main()
