"""The point cache as the sweep uses it: a key that sees every weight byte, every setting and the code, safe
reads and writes, and entries believed only when they prove themselves (issue 25, defect 3)."""
import copy
import json
import os
import shutil
import stat
import warnings

import pytest
import torch

from analysis.data import corpus as data
from analysis.runs import sweep as sweep_mod
from analysis.errors import AnalysisError
from analysis.io import point_cache
from analysis.shrink.prune import build_pruned
from analysis.io.point_identity import model_identity as fingerprint
from analysis.evaluate.measure import Evaluation
from family_cases.text_lm import build_tiny
from helpers.selections import random_selections

SMALL = dict(strategies=["l1"], ratios=[0.5], evaluation=Evaluation(context=64, max_tokens=128, latency=False))


def test_fingerprint_sees_bytes_after_the_first_4_kib():
    model = build_tiny("delta_net")
    twin = copy.deepcopy(model)
    with torch.no_grad():  # same shape, same first 4 KiB, same sum: only bytes far into the tensor differ
        flat = twin.model.embeddings.weight.view(-1)
        flat[5000] += 1e-3
        flat[9000] -= 1e-3
    a, b = model.model.embeddings.weight.detach().view(-1), twin.model.embeddings.weight.detach().view(-1)
    assert torch.equal(a[:1024], b[:1024]) and f"{a.sum():.6e}" == f"{b.sum():.6e}"
    assert fingerprint(model) != fingerprint(twin)
    assert fingerprint(model) == fingerprint(copy.deepcopy(model))


def test_fingerprint_sees_the_readout_scale():
    """Two pruned models with identical weights but different readout scales behave differently."""
    model = build_tiny("gated_deltanet")
    selections = random_selections(model, [8, 16])
    assert fingerprint(build_pruned(model, selections, "original")) != \
        fingerprint(build_pruned(model, selections, "default"))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(point_cache, "CACHE_DIR", tmp_path / "cache")
    return tmp_path / "cache"


def test_corrupt_cache_file_is_recomputed_with_a_warning(cache_dir):
    model, tok = build_tiny("delta_net"), data.load_tokenizer()
    first = list(sweep_mod.sweep(model, tok, **SMALL))
    files = sorted(cache_dir.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
    assert len(files) == 2
    files[-1].write_text(files[-1].read_text()[:20])           # truncated mid-write
    with pytest.warns(UserWarning, match="not valid JSON.*recomputing"):
        again = list(sweep_mod.sweep(model, tok, **SMALL))
    assert [p["cached"] for p in again] == [True, False]
    assert again[1]["perplexity"] == first[1]["perplexity"]
    files[-1].write_bytes(b"\xff\xfe\x00garbage")              # not even text
    with pytest.warns(UserWarning, match="not (valid JSON|UTF-8)"):
        assert [p["cached"] for p in sweep_mod.sweep(model, tok, **SMALL)] == [True, False]
    with warnings.catch_warnings():                             # repaired: served from the cache silently
        warnings.simplefilter("error")
        assert all(p["cached"] for p in sweep_mod.sweep(model, tok, **SMALL))


def test_rescale_mode_is_part_of_the_key(cache_dir):
    model, tok = build_tiny("gated_deltanet"), data.load_tokenizer()
    original = list(sweep_mod.sweep(model, tok, **SMALL))
    default = list(sweep_mod.sweep(model, tok, **SMALL, rescale="default"))
    assert [p["cached"] for p in default] == [True, False]     # the baseline is shared, the pruned point is not
    assert (original[1]["rescale"], default[1]["rescale"]) == ("original", "default")
    assert original[1]["perplexity"] != default[1]["perplexity"]
    assert original[1]["calibration"] == "none (data-free)"
    with pytest.raises(AnalysisError, match="one of original, default"):
        next(sweep_mod.sweep(model, tok, **SMALL, rescale="dk"))


def test_unwritable_cache_dir_is_one_sentence_before_any_work(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(point_cache, "CACHE_DIR", blocker / "cache")
    monkeypatch.setattr(sweep_mod, "_evaluate", lambda *a, **k: pytest.fail("work started"))
    with pytest.raises(AnalysisError, match=r"^Cannot write the sweep cache in .*STATE_RANK_CACHE"):
        next(sweep_mod.sweep(build_tiny("delta_net"), data.load_tokenizer(), **SMALL))


# ---- hostile entries: each is one one-line warning and a recompute, never served, never a hang -------------

def _entries(cache_dir):
    """Entry files, oldest first (the baseline, then the points in sweep order)."""
    return sorted(cache_dir.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)


def _edit(path, **fields):
    """Change fields of the stored result, wherever the entry format keeps it (no checksum update)."""
    entry = json.loads(path.read_text())
    (entry["result"] if "result" in entry else entry).update(fields)
    path.write_text(json.dumps(entry))


def _rerun_warns_once_and_recomputes(model, tok, first, kwargs=SMALL):
    """One sweep over a damaged last entry: exactly one one-line CacheWarning, the point computed again."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = list(sweep_mod.sweep(model, tok, **kwargs))
    assert [w.category for w in caught] == [point_cache.CacheWarning], [str(w.message) for w in caught]
    w = caught[0]
    shown = warnings.formatwarning(w.message, w.category, w.filename, w.lineno)
    assert shown.count("\n") == 1 and "recomputing" in shown, shown
    assert [p["cached"] for p in again] == [True] * (len(first) - 1) + [False]
    assert [(p["strategy"], p["ratio"]) for p in again] == [(p["strategy"], p["ratio"]) for p in first]
    assert again[-1]["perplexity"] == pytest.approx(first[-1]["perplexity"], rel=1e-6)
    return again


@pytest.mark.parametrize("fields", [{"perplexity": 1.5}, {"perplexity": "abc"}, {"perplexity": None},
                                    {"ratio": 0.3}, {"head_k_dims": "16"}],
                         ids=["edited-to-1.5", "abc", "null", "changed-ratio", "dims-not-a-list"])
def test_an_edited_entry_is_not_served(cache_dir, fields):
    model, tok = build_tiny("delta_net"), data.load_tokenizer()
    first = list(sweep_mod.sweep(model, tok, **SMALL))
    _edit(_entries(cache_dir)[-1], **fields)
    again = _rerun_warns_once_and_recomputes(model, tok, first)
    assert again[-1]["perplexity"] != 1.5


def test_a_self_consistent_entry_with_ill_typed_numbers_is_not_served(cache_dir):
    """Checksum right (a writer bug, not an edit): the field types are still checked."""
    model, tok = build_tiny("delta_net"), data.load_tokenizer()
    first = list(sweep_mod.sweep(model, tok, **SMALL))
    path = _entries(cache_dir)[-1]
    entry = json.loads(path.read_text())
    entry["result"]["perplexity"] = "abc"
    entry["sha256"] = point_cache.entry_checksum(entry["key"], entry["result"])
    path.write_text(json.dumps(entry))
    _rerun_warns_once_and_recomputes(model, tok, first)


def test_another_points_result_is_not_served_for_the_wrong_point(cache_dir):
    model, tok = build_tiny("delta_net"), data.load_tokenizer()
    kwargs = {**SMALL, "strategies": ["l1"], "ratios": [0.25, 0.5]}
    first = list(sweep_mod.sweep(model, tok, **kwargs))
    base, quarter, half = _entries(cache_dir)
    shutil.copyfile(quarter, half)                         # 0.5's entry now holds 0.25's result
    again = _rerun_warns_once_and_recomputes(model, tok, first, kwargs)
    assert [p["ratio"] for p in again] == [0.0, 0.25, 0.5]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["fifo", "symlink-to-dev-zero", "directory", "oversized", "sparse-5-GB"])
def test_an_entry_that_is_not_a_sane_regular_file_is_never_read(cache_dir, kind):
    model, tok = build_tiny("delta_net"), data.load_tokenizer()
    first = list(sweep_mod.sweep(model, tok, **SMALL))
    path = _entries(cache_dir)[-1]
    if kind == "oversized":  # still valid JSON holding the right result: refused by its size alone
        path.write_text(path.read_text()[:-1] + " " * (2 << 20) + "}")
    else:
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "symlink-to-dev-zero":
            os.symlink("/dev/zero", path)
        elif kind == "directory":
            path.mkdir()
        else:
            with open(path, "wb") as fh:
                fh.truncate(5 << 30)
    _rerun_warns_once_and_recomputes(model, tok, first)
    if kind in ("fifo", "symlink-to-dev-zero", "directory"):  # what the tool did not write is left as it was
        assert os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode)


def test_a_change_to_the_code_that_computes_points_invalidates_them(cache_dir, monkeypatch):
    model, tok = build_tiny("delta_net"), data.load_tokenizer()
    list(sweep_mod.sweep(model, tok, **SMALL))
    monkeypatch.setattr(point_cache, "code_hash", lambda: "another-version")
    assert [p["cached"] for p in sweep_mod.sweep(model, tok, **SMALL)] == [False, False]


def test_the_code_hash_covers_the_modules_that_compute_a_point(tmp_path, monkeypatch):
    from analysis.io import point_identity
    names = {p.relative_to(point_identity.PACKAGE_DIR).as_posix() for p in point_identity._closure(point_identity.ROOTS)}
    for module in ("runs/sweep.py", "shrink/sensitivity.py", "shrink/prune.py", "evaluate/perplexity.py",
                   "shrink/calibration.py", "shrink/recovery.py", "evaluate/latency.py", "archs/fla_shared/pruned.py",
                   "data/corpus.py", "models/key_plan.py", "shrink/strategies/drrqr.py", "archs/kda/adapter.py",
                   "runtime/cpu_ops/delta_rule.py"):
        assert module in names, module
    copy_dir = tmp_path / "analysis"
    shutil.copytree(point_identity.PACKAGE_DIR, copy_dir, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(point_identity, "PACKAGE_DIR", copy_dir)
    before = point_identity.code_hash.__wrapped__()
    (copy_dir / "shrink/prune.py").write_text((copy_dir / "shrink/prune.py").read_text() + "\n# a fix\n")
    assert point_identity.code_hash.__wrapped__() != before
