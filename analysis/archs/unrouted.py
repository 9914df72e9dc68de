"""What to tell a user whose model reached an fla Triton kernel the CPU path does not cover (the safety net's advice).

`analysis.runtime.triton_guard` names the module and the fla function; this adds the config flags to change. fla's
configs carry implementation switches — flags that choose which kernels run, not what the model computes — and the
project's CPU ops cover fla's defaults for them. So the advice is: set back to fla's default every such switch this
checkpoint changed, and say which.
"""
from __future__ import annotations

# Config fields of fla's models that choose an implementation, never the math (read from fla 0.6's configs and
# layers): a fused norm or gate instead of torch's, the fused SwiGLU, the fused losses, the kernel schedule.
IMPLEMENTATION_FLAGS = ("fuse_norm", "fuse_swiglu", "fuse_cross_entropy", "fuse_linear_cross_entropy", "attn_mode")


def _default_config(config):
    try:
        return type(config)()
    except Exception:  # a config class that needs arguments: no defaults to compare with
        return None


def advice(launch) -> str | None:
    """'set `fuse_norm` back to fla's default true in config.json, ...' for the switches this model changed."""
    config = launch.config
    if config is None or not type(config).__module__.startswith("fla."):
        return None
    default = _default_config(config)
    if default is None:
        return None
    changed = [(flag, getattr(default, flag)) for flag in IMPLEMENTATION_FLAGS
               if hasattr(config, flag) and hasattr(default, flag) and getattr(config, flag) != getattr(default, flag)]
    if not changed:
        return None
    parts = [f"`{flag}` to {_json(value)}" for flag, value in changed]
    words = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return (f"set {words} (fla's defaults) in the model's config.json: these flags choose fla's kernels, not the "
            "model's math, and the project's CPU ops cover the defaults")


def _json(value) -> str:
    return {True: "true", False: "false", None: "null"}.get(value, repr(value)) if not isinstance(value, str) \
        else f'"{value}"'


def install() -> None:
    from analysis.runtime import triton_guard
    triton_guard.set_advice(advice)
