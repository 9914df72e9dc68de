"""Issue 12: a hybrid's Model page lists every block in order, softmax attention with its KV cache, no state."""
from analysis.models.load import describe
from family_cases.fla_hybrid import SOFTMAX_BLOCKS, make_model
from ui.shared.blocks import blocks_frame, hybrid_note


def test_hybrid_blocks_table_and_note():
    info = describe(make_model())
    frame = blocks_frame(info)
    assert list(frame.index) == [0, 1, 2, 3]
    for block in SOFTMAX_BLOCKS:
        assert frame.loc[block, "Kind"] == "softmax attention" and "no state; KV cache" in frame.loc[block, "Memory per sequence"]
    # 2 key/value heads × head_dim 16 (hidden 64 / 4 query heads) × keys and values × 4 bytes (fp32)
    assert info.blocks[1].kv_cache_bytes_per_token == 2 * 2 * 16 * 4 and "256 B per token" in frame.loc[1, "Memory per sequence"]
    assert frame.loc[0, "Kind"] == "linear attention (layer 0)" and frame.loc[2, "Kind"] == "linear attention (layer 1)"
    note = hybrid_note(info)
    assert "0→0, 1→2" in note and "blocks 1, 3 are softmax attention" in note
    assert info.kv_cache_bytes_per_token == 2 * 256 and info.layers == 2


def test_mamba2_hybrid_blocks_name_their_mixers_and_feed_forwards():
    """Nemotron-H "M*M-": Mamba-2, attention, Mamba-2, MLP block; Granite-H: each layer's MoE + shared MLP named."""
    from family_cases.mamba2 import make_model as make_mamba2
    kinds = list(blocks_frame(describe(make_mamba2("nemotron_h")))["Kind"])
    assert kinds == ["Mamba-2 SSD mixer (layer 0)", "softmax attention", "Mamba-2 SSD mixer (layer 1)",
                     "MLP feed-forward, not pruned"]
    kinds = list(blocks_frame(describe(make_mamba2("granitemoehybrid")))["Kind"])
    assert kinds[1] == "softmax attention + MoE feed-forward (mixture of experts) + shared MLP (not pruned)"
    assert kinds[0] == "Mamba-2 SSD mixer (layer 0) + MoE feed-forward (mixture of experts) + shared MLP (not pruned)"


def test_kimi_mla_blocks_are_labelled_with_their_latent_cache():
    """docs/families.md: Kimi's MLA blocks are labelled (cache: latent + rope key per token), not as plain K/V."""
    from family_cases.kimi_linear import CASE
    model = CASE.make_model()
    info = describe(model)
    frame = blocks_frame(info)
    mla = [b for b in info.blocks if b.kind == "softmax"]
    assert mla
    for b in mla:
        attn = model.model.layers[b.block].self_attn
        row = frame.loc[b.block]
        assert f"{attn.kv_lora_rank}-dim latent + {attn.qk_rope_head_dim}-dim rope key" in row["Heads and dims"]
        assert "latent cache" in row["Memory per sequence"] and "KV cache" not in row["Memory per sequence"]
        assert b.kv_cache_bytes_per_token == (attn.kv_lora_rank + attn.qk_rope_head_dim) * 4  # fp32, one head
