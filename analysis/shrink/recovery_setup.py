"""What a recovery trains, per method: `qk` the pruned q/k rows at full rank (the adapter's `channel_rows`);
`lora`/`lora-kd` PEFT LoRA on the family's q/k/v projections (the adapter's `lora_targets`) plus every
parameter named conv1d, norm or bias, as the reference code (LinearAttentionPruning's flame trainer) does.
peft is imported only here, and only when a LoRA method runs; the merged model needs no peft to load."""
from __future__ import annotations

from analysis.archs import adapter_for
from analysis.errors import AnalysisError
from analysis.models.channel_group import channel_groups
from analysis.models.load import attention_layers

LORA_METHODS = ("lora", "lora-kd")
ALSO_TRAINED = ("conv1d", "norm", "bias")  # name parts the reference trains in full next to the adapters


def lora_target_modules(model) -> dict[str, object]:
    """{qualified module name: nn.Linear} of every LoRA target in the model's linear-attention layers."""
    adapter = adapter_for(model)
    names = {id(m): n for n, m in model.named_modules()}
    targets = {}
    for layer in attention_layers(model):
        for path in adapter.lora_targets(layer):
            targets[f"{names[id(layer)]}.{path}"] = layer.get_submodule(path)
    return targets


def check_lora(model, rank: int) -> None:
    """One sentence for a family with no LoRA targets or a rank outside 1 … the narrowest target's width."""
    targets = lora_target_modules(model)
    if not targets:
        raise AnalysisError(f"The {adapter_for(model).label} family names no q/k/v projections for LoRA; use "
                            "--recover-method qk (full-rank q/k rows) for this model.")
    width = min(min(m.in_features, m.out_features) for m in targets.values())
    if not 1 <= rank <= width:
        raise AnalysisError(f"LoRA rank {rank} is outside 1 … {width} (the narrowest adapted projection's width); "
                            "choose a rank in that range.")


def qk_trainable(work) -> list:
    """Turn on the gradients of the parameters holding the pruned q/k rows; returns them (each once)."""
    params = []
    for group in channel_groups(work):
        for rows in group.rows:
            p = group.module.get_parameter(rows.param)
            if not any(p is seen for seen in params):
                p.requires_grad_(True)
                params.append(p)
    return params


def wrap_lora(work, rank: int, alpha: float):
    """`work` wrapped by peft (LoRA r, α, dropout 0 on the targets; A random, B zero, so it starts as `work`),
    with the conv1d / norm / bias parameters trainable too."""
    from peft import LoraConfig, get_peft_model
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, bias="none",
                        target_modules=sorted(lora_target_modules(work)))
    wrapped = get_peft_model(work, config)
    for name, p in wrapped.named_parameters():
        if any(part in name for part in ALSO_TRAINED):
            p.requires_grad_(True)
    return wrapped


def trainable(model) -> dict:
    """{name: parameter} of what learns, in a stable order (the optimizer's and the saved state's)."""
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def merged(work, method: str):
    """The plain model: LoRA folded into the base weights by peft (`merge_and_unload`), or `work` itself."""
    return work.merge_and_unload() if method in LORA_METHODS else work
