"""An fla hybrid: Gated DeltaNet whose config `attn` makes blocks 1 and 3 softmax attention (4 blocks, 2 linear)."""
import torch

from family_cases import FamilyCase
from family_cases.fla_reference import fla_layer_states

SOFTMAX_BLOCKS = (1, 3)


def make_model():
    import analysis  # noqa: F401  (CPU path, and fla's softmax attention routed to torch)
    from fla.models import GatedDeltaNetConfig
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    config = GatedDeltaNetConfig(hidden_size=64, num_hidden_layers=4, num_heads=2, head_dim=32, expand_v=1.0,
                                 vocab_size=512, tie_word_embeddings=True,
                                 attn={"layers": list(SOFTMAX_BLOCKS), "num_heads": 4, "num_kv_heads": 2})
    return AutoModelForCausalLM.from_config(config).eval()


def reference_states(model, layer_index, hidden_in):
    from analysis.models.load import attention_layers
    return fla_layer_states(attention_layers(model)[layer_index], hidden_in)


CASE = FamilyCase(name="gated_deltanet", make_model=make_model, reference_states=reference_states)
