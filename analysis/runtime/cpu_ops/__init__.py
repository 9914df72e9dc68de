"""Pure-torch versions of the recurrence ops the supported families call (fla 0.6.0 is Triton-only): the delta
rule (plain, gated, per-channel decay), its diagonal-plus-low-rank generalisation, linear attention with a scalar or
per-channel decay, the short convolution and the norms.

Each op here has fla's math and fla's tensor layouts; each recurrence op (chunked, plus its token loop) belongs to one
kind of `Recurrence` (analysis.runtime.recurrences), and `analysis.runtime.backend` routes CPU tensors to it and
leaves CUDA tensors on the families' own kernels.
"""
