"""transformers' Mamba-2 mixers: a tiny Nemotron-H ("M*M-": Mamba-2, attention, Mamba-2, MLP) is the family case;
`make_model(model_type)` builds the other covered types too (tests/archs/test_mamba2.py runs them all).

reference_states is written from Mamba-2's definition (the SSD paper and transformers' Mamba2Mixer layout), not
from the project's ops: in_proj → [z | x | B | C | dt], depthwise causal conv (with bias) over x|B|C, SiLU,
dt = clamp(softplus(dt + dt_bias), time_step_limit), A = −e^{A_log}, per head h of group g = h // (heads/groups):
    h_t = e^{A·dt_t} h_{t−1} + dt_t · B_t x_tᵀ    (K-first [N, head_dim]),
Falcon-H1 scales the mixer input by ssm_in_multiplier and the projection by mup_vector first.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from family_cases import FamilyCase
from family_cases.fla_reference import conv_silu

N, GROUPS, HEAD_DIM, HEADS = 16, 2, 8, 8
COMMON = dict(vocab_size=97, hidden_size=32, num_attention_heads=2, num_key_value_heads=1, intermediate_size=64,
              tie_word_embeddings=True)


def make_config(model_type: str = "nemotron_h"):
    if model_type == "mamba2":
        from transformers.models.mamba2 import Mamba2Config
        return Mamba2Config(vocab_size=97, hidden_size=32, num_hidden_layers=2, state_size=N, n_groups=GROUPS,
                            head_dim=HEAD_DIM, num_heads=HEADS, expand=2, conv_kernel=4, chunk_size=8,
                            tie_word_embeddings=True)
    if model_type == "nemotron_h":
        from transformers.models.nemotron_h import NemotronHConfig
        return NemotronHConfig(**COMMON, hybrid_override_pattern="M*M-", ssm_state_size=N, n_groups=GROUPS,
                               mamba_head_dim=HEAD_DIM, mamba_num_heads=HEADS, head_dim=16, chunk_size=8)
    if model_type == "granitemoehybrid":
        from transformers.models.granitemoehybrid import GraniteMoeHybridConfig
        return GraniteMoeHybridConfig(**COMMON, num_hidden_layers=4,
                                      layer_types=["mamba", "attention", "mamba", "mamba"],
                                      mamba_d_state=N, mamba_n_groups=GROUPS, mamba_d_head=HEAD_DIM,
                                      mamba_n_heads=HEADS, mamba_expand=2, num_local_experts=4, num_experts_per_tok=2,
                                      shared_intermediate_size=32, mamba_chunk_size=8)
    if model_type == "falcon_h1":
        from transformers.models.falcon_h1 import FalconH1Config
        return FalconH1Config(**COMMON, num_hidden_layers=2, mamba_d_state=N, mamba_n_groups=GROUPS,
                              mamba_d_head=HEAD_DIM, mamba_n_heads=HEADS, mamba_d_ssm=HEADS * HEAD_DIM, head_dim=16,
                              mamba_chunk_size=8, ssm_multipliers=[1.0, 0.5, 2.0, 0.25, 1.5], ssm_in_multiplier=0.7)
    if model_type == "bamba":
        from transformers.models.bamba import BambaConfig
        return BambaConfig(**COMMON, num_hidden_layers=3, attn_layer_indices=[1], mamba_d_state=N,
                           mamba_n_groups=GROUPS, mamba_d_head=HEAD_DIM, mamba_n_heads=HEADS, mamba_expand=2,
                           mamba_chunk_size=8)
    if model_type == "zamba2":
        from transformers.models.zamba2 import Zamba2Config
        return Zamba2Config(vocab_size=97, hidden_size=32, num_hidden_layers=3,
                            layers_block_type=["mamba", "hybrid", "mamba"],
                            mamba_d_state=N, mamba_ngroups=GROUPS, mamba_headdim=HEAD_DIM, n_mamba_heads=HEADS,
                            mamba_expand=2, num_attention_heads=2, num_key_value_heads=2, attention_head_dim=16,
                            intermediate_size=64, chunk_size=8, tie_word_embeddings=True)
    raise ValueError(model_type)


def make_model(model_type: str = "nemotron_h"):
    import analysis  # noqa: F401
    from transformers import AutoModelForCausalLM

    from analysis.archs.mamba2 import ADAPTER
    ADAPTER.install_routing()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(make_config(model_type)).float().eval()
    with torch.no_grad():  # spread the decays and step sizes so the decay matters at this size
        for layer in ADAPTER.linear_layers(model):
            layer.A_log.uniform_(-1.0, 1.0)
            layer.dt_bias.uniform_(-2.0, 0.5)
            layer.D.normal_()
            if layer.conv1d.bias is not None:
                layer.conv1d.bias.normal_(0, 0.3)
    return model


@torch.no_grad()
def reference_states(model, layer_index: int, hidden_in: torch.Tensor) -> torch.Tensor:
    """All states [B,T,heads,N,head_dim] (K-first) of Mamba-2 layer `layer_index`, token by token."""
    from analysis.archs.mamba2 import ADAPTER
    layer = ADAPTER.linear_layers(model)[layer_index]
    x = hidden_in.double() * getattr(layer, "ssm_in_multiplier", 1.0)
    Bsz, T, _ = x.shape
    H, G, P, n = layer.num_heads, layer.n_groups, layer.head_dim, layer.ssm_state_size
    I = H * P
    proj = x @ layer.in_proj.weight.double().T
    if layer.in_proj.bias is not None:
        proj = proj + layer.in_proj.bias.double()
    if hasattr(layer, "mup_vector"):
        proj = proj * layer.mup_vector.double()
    z_rows = proj.shape[-1] - (I + 2 * G * n) - H
    xBC, dt = proj[..., z_rows:z_rows + I + 2 * G * n], proj[..., -H:]
    bias = layer.conv1d.bias.double() if layer.conv1d.bias is not None else None
    xBC = conv_silu(xBC, layer.conv1d.weight.double(), bias).double()
    xs, Bm, Cm = xBC.split([I, G * n, G * n], dim=-1)
    xs, Bm = xs.reshape(Bsz, T, H, P), Bm.reshape(Bsz, T, G, n)
    lo, hi = layer.time_step_limit
    dt = F.softplus(dt + layer.dt_bias.double()).clamp(min=lo, max=hi)   # [B,T,H]
    A = -layer.A_log.double().exp()
    S = x.new_zeros(Bsz, H, n, P)
    states = []
    for t in range(T):
        for h in range(H):
            g = h // (H // G)
            S[:, h] = (A[h] * dt[:, t, h]).exp()[:, None, None] * S[:, h] + \
                dt[:, t, h, None, None] * Bm[:, t, g, :, None] * xs[:, t, h, None, :]
        states.append(S.clone())
    return torch.stack(states, dim=1)


CASE = FamilyCase(name="mamba2", make_model=make_model, reference_states=reference_states)
