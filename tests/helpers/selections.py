"""Random kept-channel selections: a strategy-free way to prune, for tests that check the prune itself."""
import torch

from analysis.models.load import attention_layers
from analysis.shrink.strategies.base import Selection


def random_selections(model, dims, seed=0):
    """Per layer, `dims[i]` sorted random key channels of every head (seeded)."""
    gen = torch.Generator().manual_seed(seed)
    return [Selection(indices=torch.stack([torch.randperm(a.head_k_dim, generator=gen)[:k].sort().values
                                           for _ in range(a.num_heads)]))
            for a, k in zip(attention_layers(model), dims)]
