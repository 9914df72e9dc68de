"""transformers' own pure-torch implementations, unwrapped from the project's routing: the reference the routed
CPU forward is compared with (tests/archs)."""


def torch_fallback(module, name: str):
    """transformers' own pure-torch implementation of an entry point (the function its wrapper decorates)."""
    fn = getattr(module, name)
    while getattr(fn, "_analysis_routed", False) or hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn
