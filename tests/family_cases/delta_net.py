"""fla DeltaNet: 2 layers, 2 heads, dk = dv = 32 (conv, SiLU, l2 norm, β)."""
import torch

from family_cases import FamilyCase
from family_cases.fla_reference import fla_layer_states

SIZES = dict(hidden_size=64, num_hidden_layers=2, num_heads=2, vocab_size=512, tie_word_embeddings=True)


def make_config(**overrides):
    from fla.models import DeltaNetConfig
    return DeltaNetConfig(**{**SIZES, **overrides})


def make_model(seed: int = 0, **overrides):
    import analysis  # noqa: F401  (CPU path)
    from transformers import AutoModelForCausalLM
    config = make_config(**overrides)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config).eval()


def reference_states(model, layer_index, hidden_in):
    from analysis.models.load import attention_layers
    return fla_layer_states(attention_layers(model)[layer_index], hidden_in)


CASE = FamilyCase(name="delta_net", make_model=make_model, reference_states=reference_states)
