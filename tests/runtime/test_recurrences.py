"""Issue 31 item 3: one `Recurrence` per kind (analysis.runtime.recurrences) holds everything kind-specific.

Per kind: the chunked op equals the kind's own token loop (output, every state and the final state), one head stepped
by `step` (the State lab's "model" rule) equals the loop's states, `latency`'s inputs have the shapes both its CPU
op and fla's CUDA op take, and it has its equations. Tolerance: 1e-5 relative to the largest reference entry (fp32
chunked vs fp32 loop over 70 tokens of unit keys and decays in (−0.1, 0); the bound the op tests use). Then the rule
itself: no module outside the seam, the CPU ops and the family folders asks which kind a recurrence is.
"""
import ast
import copy
import inspect
import importlib
from pathlib import Path

import pytest
import torch

import analysis  # noqa: F401
from analysis.archs import FAMILIES, get_adapter
from analysis.archs.kernels import KERNELS
from analysis.archs.recurrence_words import words
from analysis.evaluate.latency import cuda_arguments, kernel_inputs
from analysis.runtime.recurrences import RECURRENCES, RecurrenceInputs
from helpers.state_sink import Sink

ROOT = Path(__file__).resolve().parents[2]
B, H, DK, DV = 2, 2, 8, 6
TOL = 1e-5


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-12))


def prepared(recurrence, T, seed=0) -> RecurrenceInputs:
    """`latency`'s random inputs for this kind, with a readout scale and an initial state, as prepared inputs."""
    gen = torch.Generator().manual_seed(seed)
    x = recurrence.latency_inputs(B, T, H, DK, DV, "cpu", torch.float32, gen)
    return RecurrenceInputs(q=x["q"], k=x["k"], v=x["v"], beta=x.get("beta", torch.ones(B, T, H)), g=x.get("g"),
                            scale=DK ** -0.5, initial_state=torch.randn(B, H, DK, DV, generator=gen), cu_seqlens=None,
                            recurrence=recurrence, a=x.get("a"), b=x.get("b"))


@pytest.mark.parametrize("T", [1, 70])   # one token; one 64-token chunk and a ragged end
@pytest.mark.parametrize("name", list(RECURRENCES))
def test_chunked_op_equals_the_token_loop_and_step(name, T):
    recurrence = RECURRENCES[name]
    r = prepared(recurrence, T)
    sink = Sink(list(range(T)))
    o, S = recurrence.chunked(r, sink)
    o_loop, states = recurrence.loop(r, return_all_states=True)
    assert o.shape == (B, T, H, DV) and S.shape == (B, H, DK, DV)
    assert rel(o, o_loop) < TOL and rel(S, states[:, -1]) < TOL
    handed = torch.cat(sink.parts, dim=2)                                  # [B, H, T, dk, dv]
    assert sink.offsets == list(range(T)) and rel(handed, states.transpose(1, 2)) < TOL
    # one head, token by token through `step` (what the State lab runs as the layer's own rule)
    at = (lambda z, t: None if z is None else z[0, t, 1])  # noqa: E731
    S_head = r.initial_state[0, 1].clone()
    for t in range(T):
        S_head = recurrence.step(S_head, r.k[0, t, 1], r.v[0, t, 1], r.beta[0, t, 1], at(r.g, t), at(r.a, t),
                                 at(r.b, t))
        assert rel(S_head, states[0, t, 1]) < TOL, t


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_latency_inputs_fit_the_cpu_op_and_fla_s_cuda_op(kernel):
    """The inputs `latency` times bind to fla's op by its signature (no GPU needed) and run through the CPU op."""
    spec = KERNELS[kernel]
    x = kernel_inputs(1, 32, 2, 8, 4, "cpu", torch.bfloat16, spec, torch.Generator().manual_seed(0))
    assert x["q"].shape == x["k"].shape == (1, 32, 2, 8) and x["v"].shape == (1, 32, 2, 4)
    for name in set(x) - {"q", "k", "v"}:
        assert x[name].shape[:3] == (1, 32, 2), name       # per token and head; g and a, b per key channel too
    o, S = spec.recurrence.run(x)
    assert o.shape == (1, 32, 2, 4) and S.shape == (1, 2, 8, 4) and bool(torch.isfinite(o).all())
    op = getattr(importlib.import_module(spec.cuda_op[0]), spec.cuda_op[1])
    inspect.signature(op).bind(**cuda_arguments(spec, x, torch.bfloat16))


@pytest.mark.parametrize("name", list(RECURRENCES))
def test_each_recurrence_has_its_equations_and_survives_a_pickle(name):
    recurrence = RECURRENCES[name]
    assert recurrence.update.startswith("S_t = ") and "S_{t-1}" in recurrence.update
    assert recurrence.decay_words and isinstance(recurrence.writes, str)
    # Streamlit's caches pickle the lab's inputs; the project never unpickles, so the copy protocol a pickle follows
    # (__reduce__) is checked through deepcopy, which uses it too
    rebuild, args = recurrence.__reduce__()
    assert rebuild(*args) is recurrence and copy.deepcopy(recurrence) is recurrence


def test_every_family_names_a_registered_recurrence_and_the_pages_show_its_rule():
    for family in FAMILIES:
        adapter = get_adapter(family)
        recurrence = adapter.kernel_spec.recurrence
        assert RECURRENCES[recurrence.name] is recurrence
        assert words(adapter).update == recurrence.update


SEAM = {"analysis/runtime/recurrences.py"}
KIND_ATTRIBUTES = {"delta", "low_rank", "gate", "decay", "takes"}   # what a recurrence's kind reads as data
KIND_WORDS = {"head", "channel"}   # decay shapes ("none" is also a filter name elsewhere; `.gate`/`.decay` catch it)


def kind_questions(path: Path) -> list[str]:
    """Places that ask which kind a recurrence is: a kind attribute read, a comparison with a decay shape or with a
    recurrence's name, a `delta=`/`low_rank=`/`gate=` keyword, or g's number of dims."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        where = f"{path.relative_to(ROOT) if ROOT in path.parents else path.name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Attribute) and node.attr in KIND_ATTRIBUTES and isinstance(node.ctx, ast.Load):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"{where} .{node.attr}")
        elif isinstance(node, ast.keyword) and node.arg in {"delta", "low_rank"}:
            found.append(f"{where} {node.arg}=")
        elif isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
            if any(isinstance(p, ast.Constant) and p.value in KIND_WORDS for p in parts):
                found.append(f"{where} compares with a decay shape")
            if any(isinstance(p, ast.Attribute) and p.attr == "name" and "recurrence" in ast.unparse(p) for p in parts):
                found.append(f"{where} compares a recurrence's name")
            if any(isinstance(p, ast.Call) and isinstance(p.func, ast.Attribute) and p.func.attr == "dim"
                   and ast.unparse(p.func.value).split(".")[-1] == "g" for p in parts):
                found.append(f"{where} reads g's dims")
    return found


def outside_the_seam() -> list[Path]:
    """The core, ui/ and pages/, without the seam, the CPU ops (each op is one kind's) and the family folders."""
    files = [*(ROOT / "analysis").rglob("*.py"), *(ROOT / "ui").rglob("*.py"), *(ROOT / "pages").rglob("*.py")]
    families = {ROOT / "analysis" / "archs" / f for f in FAMILIES} | {ROOT / "analysis" / "archs" / "fla_shared"}
    return [p for p in files if str(p.relative_to(ROOT)) not in SEAM
            and (ROOT / "analysis" / "runtime" / "cpu_ops") not in p.parents and not families & set(p.parents)]


def test_no_module_outside_the_seam_asks_which_kind_a_recurrence_is():
    offenders = [hit for path in outside_the_seam() for hit in kind_questions(path)]
    assert offenders == []


def test_the_kind_check_catches_what_it_looks_for(tmp_path):
    """The check above can fail: each pattern it bans is found in a file that has it."""
    probe = tmp_path / "kind_probe.py"
    probe.write_text("def f(r, spec, x):\n    if r.delta or spec.low_rank or x.g.dim() == 2:\n        return 1\n"
                     "    if spec.gate == 'channel' or r.recurrence.name == 'delta_rule':\n        return g(delta=False)\n")
    hits = kind_questions(probe)
    assert len(hits) == 7, hits
