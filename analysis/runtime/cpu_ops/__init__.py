"""Pure-torch versions of the fla ops that DeltaNet and Gated DeltaNet call (fla 0.6.0 is Triton-only).

Each op here has fla's math and fla's tensor layouts; `analysis.runtime.backend` routes CPU tensors to them and
leaves CUDA tensors on fla's own kernels.
"""
