"""Issue 30 on the command line: `--max-memory` below a model's size streams it (one line on stderr saying so) and
gives the in-memory numbers; what cannot stream (recovery) and every broken input is one sentence, exit 2, with
nothing written; Stop takes effect within a block.

The model is the tiny text DeltaNet (tests/family_cases/text_lm.py) with 12 layers, saved in shards: 5.3 MB of
weights, its largest part the 2.1 MB tied embeddings (read by rows, and the head in row slices: issue 41), its
largest layer 266 kB; the budget is 4 MiB.
"""
from __future__ import annotations

import errno
import json
import os
import shutil

import pytest
import torch

from analysis.cli.main import main
from analysis.errors import AnalysisError
from analysis.models import budget, load as models
from analysis.models.stream.model import StreamedModel
from family_cases.text_lm import build_tiny
from helpers.numbers import same

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BUDGET = "4MiB"
SMALL = ["--tokens", "16", "--batch", "2", "--quiet"]


@pytest.fixture(scope="module")
def deep_lm(tmp_path_factory):
    path = tmp_path_factory.mktemp("deep-lm") / "model"
    build_tiny("delta_net", num_hidden_layers=12).save_pretrained(path, max_shard_size="1MB")
    return path


def _sharded_copy(deep_lm, tmp_path, name="copy"):
    copy = tmp_path / name
    shutil.copytree(deep_lm, copy)
    return copy, sorted(copy.glob("model-*.safetensors"))


def test_rank_and_ppl_streamed_say_so_and_give_the_in_memory_numbers(deep_lm, tmp_path, capsys):
    out = {}
    for label, extra in (("whole", []), ("streamed", ["--max-memory", BUDGET])):
        assert main(["rank", str(deep_lm), *SMALL, "--stride", "4", "--json", str(tmp_path / f"rank-{label}.json"),
                     *extra]) == 0
        assert main(["ppl", str(deep_lm), "--context", "32", "--max-tokens", "256", "--quiet", "--json",
                     str(tmp_path / f"ppl-{label}.json"), *extra]) == 0
        out[label] = capsys.readouterr().err
    assert "streaming" not in out["whole"]
    note = [line for line in out["streamed"].splitlines() if line.startswith("streaming:")]
    assert note and note[0].startswith("streaming: one block at a time (12 blocks, 5.3 MB on disk, largest block ") \
        and note[0].endswith("), budget 4.0 MiB"), out["streamed"]
    rank = [json.loads((tmp_path / f"rank-{k}.json").read_text()) for k in ("whole", "streamed")]
    assert rank[0]["layers"] == rank[1]["layers"]  # the same operations on the same inputs: the same numbers
    ppl = [json.loads((tmp_path / f"ppl-{k}.json").read_text()) for k in ("whole", "streamed")]
    assert abs(ppl[1]["perplexity"] / ppl[0]["perplexity"] - 1) <= 1e-5 and ppl[0]["tokens"] == ppl[1]["tokens"]


def test_noise_importance_and_prune_streamed_give_the_in_memory_numbers(deep_lm, tmp_path, capsys):
    """The same operations on the same inputs: noise and importance JSON equal to the in-memory run's (floats within
    1e-5 relative: the gradient strategy's sums run one layer at a time), the kept sets equal, and `prune --out`
    writes byte-identical tensors in shards (with perplexity before and after), removing key channels or whole heads.
    Every strategy is compared per family in tests/models/test_streamed.py; here a data-free, a calibration and the
    gradient strategy."""
    from safetensors.torch import load_file

    runs = {}
    for label, extra in (("whole", []), ("streamed", ["--max-memory", BUDGET])):
        for command, args in (("noise", [*SMALL, "--stride", "16", "--samples", "8", "--snr", "10", "--keys", "4"]),
                              ("importance", ["--strategies", "l1,wanda,grad", "--calib-sequences", "2",
                                              "--calib-tokens", "16", "--quiet"]),
                              ("prune", ["--strategy", "l1", "--ratio", "0.5", "--eval-tokens", "64",
                                         "--eval-context", "32", "--quiet", "--out", str(tmp_path / f"out-{label}")]),
                              ("prune", ["--heads", "0.5", "--head-strategy", "random", "--eval-tokens", "64",
                                         "--eval-context", "32", "--quiet", "--out",
                                         str(tmp_path / f"heads-{label}")])):
            assert main([command, str(deep_lm), *args, "--json", str(tmp_path / f"{command}-{label}.json"),
                         *extra]) == 0, capsys.readouterr().err
        runs[label] = {c: json.loads((tmp_path / f"{c}-{label}.json").read_text()) for c in ("noise", "importance")}
    capsys.readouterr()
    same(runs["streamed"]["noise"]["layers"], runs["whole"]["noise"]["layers"], "noise", rel=1e-5)
    same(runs["streamed"]["importance"]["scores"], runs["whole"]["importance"]["scores"], "scores", rel=1e-5)
    assert runs["streamed"]["importance"]["kept"] == runs["whole"]["importance"]["kept"]
    for out in ("out", "heads"):
        shards = sorted((tmp_path / f"{out}-streamed").glob("*.safetensors"))
        assert len(shards) > 1 and (tmp_path / f"{out}-streamed" / "model.safetensors.index.json").exists()
        got = {k: v for f in shards for k, v in load_file(f).items()}
        want = {k: v for f in (tmp_path / f"{out}-whole").glob("*.safetensors") for k, v in load_file(f).items()}
        assert got.keys() == want.keys() and all(torch.equal(got[k].view(torch.uint8), want[k].view(torch.uint8))
                                                 for k in want)
        # issue 44: the streamed save ships the same code and layout as the whole model's
        streamed, whole = tmp_path / f"{out}-streamed", tmp_path / f"{out}-whole"
        assert {p.name: p.read_text() for p in streamed.glob("*.py")} == {p.name: p.read_text() for p in whole.glob("*.py")}
        assert len(list(whole.glob("*.py"))) == 2
        layouts = [json.loads((d / "config.json").read_text())["pruned_layout"] for d in (streamed, whole)]
        assert layouts[0] == layouts[1]


def test_recovery_is_refused_before_any_work_when_the_model_streams(deep_lm, tmp_path, capsys):
    out = tmp_path / "pruned"
    code = main(["prune", str(deep_lm), "--strategy", "l1", "--ratio", "0.5", "--recover-steps", "2", "--quiet",
                 "--max-memory", BUDGET, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "Recovery trains with gradients through the whole model at once, so it is never run " \
        "one block at a time" in err and "raise --max-memory above" in err and "--dtype bfloat16" in err, err
    assert not out.exists() and err.count("error:") == 1


def test_what_needs_the_model_whole_refuses_a_streamed_one_in_one_sentence(deep_lm, tmp_path, capsys):
    """lm-evaluation-harness (padded batches, token-by-token generation) and a call with a mask, labels or a cache."""
    out = tmp_path / "eval.json"
    assert main(["eval", str(deep_lm), "--tasks", "shakespeare_last_word", "--limit", "2", "--quiet",
                 "--max-memory", BUDGET, "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "error: lm-evaluation-harness needs the model whole in memory" in err and \
        "over the memory budget; raise --max-memory" in err, err
    assert not out.exists()
    model = _streamed(deep_lm)
    ids = torch.randint(1, 1000, (1, 8), generator=torch.Generator().manual_seed(0))
    with budget.budget_scope(4 << 20), pytest.raises(AnalysisError, match=r"runs whole, unpadded sequences of token "
                                                                         r"ids only \(it was given attention_mask\)"):
        model(ids, attention_mask=torch.ones_like(ids))


def _broken(deep_lm, tmp_path, how):
    copy, shards = _sharded_copy(deep_lm, tmp_path, how)
    if how == "missing shard":
        shards[1].unlink()
    elif how == "truncated shard":
        os.truncate(shards[0], shards[0].stat().st_size - 100)
    elif how == "corrupt shard":
        shards[0].write_bytes((40).to_bytes(8, "little") + b"{not json at all, just forty bytes.....}")
    elif how == "link out of the folder":
        outside = tmp_path / "elsewhere.safetensors"
        shutil.move(shards[0], outside)
        shards[0].symlink_to(outside)
    elif how == "FIFO shard":
        shards[0].unlink()
        os.mkfifo(shards[0])
    elif how == "tensor in no shard":
        from safetensors.torch import load_file, save_file
        tensors = load_file(shards[0])
        dropped = sorted(tensors)[0]
        save_file({k: v for k, v in tensors.items() if k != dropped}, shards[0], metadata={"format": "pt"})
        index = json.loads((copy / "model.safetensors.index.json").read_text())
        del index["weight_map"][dropped]
        (copy / "model.safetensors.index.json").write_text(json.dumps(index))
    return copy


BROKEN = {
    "missing shard": r"names the shard model-00002-of-\d+\.safetensors, which is not in",
    "truncated shard": r"model-00001-of-\d+\.safetensors is corrupt or truncated",
    "corrupt shard": r"model-00001-of-\d+\.safetensors is corrupt or truncated",
    "link out of the folder": r"is a symbolic link to .*elsewhere\.safetensors, outside the model folder",
    "FIFO shard": r"is not a regular file \(it is a FIFO\)",
    "tensor in no shard": r"do not match its config\.json: 1 tensor missing",
}


@pytest.mark.parametrize("how", list(BROKEN))
def test_a_broken_checkpoint_is_one_sentence_and_nothing_is_written(deep_lm, tmp_path, capsys, how):
    import re
    folder = _broken(deep_lm, tmp_path, how)
    before = sorted(p.name for p in folder.iterdir())
    out = tmp_path / "pruned"
    code = main(["prune", str(folder), "--strategy", "l1", "--ratio", "0.5", "--quiet", "--max-memory", BUDGET,
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and re.search(BROKEN[how], err), err
    assert not out.exists() and sorted(p.name for p in folder.iterdir()) == before


def test_a_budget_below_the_largest_part_names_its_size_and_a_bad_budget_is_refused(deep_lm, capsys):
    # the 2.1 MB embedding is read by rows and the head in slices (issue 41): 1 MiB holds a 266 kB layer, and what
    # does not fit is the work of 2 × 16 tokens, said with the block it holds (tests/models/test_stream_rows.py:
    # a budget below the largest layer)
    assert main(["rank", str(deep_lm), *SMALL, "--max-memory", "1MiB"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("streaming: one block at a time (12 blocks, 5.3 MB on disk, largest block 266.4 kB)")
    assert "(2 × 16 tokens, one block at a time: its largest block model.layers.0 holds 266.4 kB, the work for the " \
        "tokens the rest) needs about 1.3 MB of memory, more than the memory budget of 1.0 MiB; use fewer tokens or " \
        "sequences." in err[1] and len(err) == 2, err
    assert main(["rank", str(deep_lm), "--max-memory", "4 gigs"]) == 2
    err = capsys.readouterr().err
    assert "argument --max-memory: '4 gigs' is not a size; write a number and a unit, e.g. 4GiB" in err


def _streamed(deep_lm):
    with budget.budget_scope(4 << 20):
        model = models.load_model(str(deep_lm), device="cpu")
    assert isinstance(model, StreamedModel)
    return model


def test_a_full_disk_while_spilling_or_writing_shards_is_one_sentence(deep_lm, tmp_path, monkeypatch):
    from analysis.models.stream import hidden
    from analysis.shrink.prune import prune
    from analysis.models.key_plan import plan_key_dims
    from analysis.io.model_dir import save_model
    model = _streamed(deep_lm)
    ids = torch.randint(1, 1000, (2, 16), generator=torch.Generator().manual_seed(0))

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    with monkeypatch.context() as m:
        m.setattr(hidden.os, "pwrite", full)
        with budget.budget_scope(4 << 20), pytest.raises(AnalysisError, match=r"Spilling hidden states to .* failed: "
                                                                             r"the disk is full; free space there"):
            model.run([ids], hidden_limit=0)  # nothing may stay in memory: every hidden state is spilled
    assert model.skeleton.live == set()
    with budget.budget_scope(4 << 20):
        pruned = prune(model, "l1", plan_key_dims(model, ratio=0.5)).model
    with monkeypatch.context() as m:
        m.setattr("analysis.io.shards.ShardWriter._file", lambda self, index: full())
        with budget.budget_scope(4 << 20), pytest.raises(AnalysisError, match=r"the disk is full"):
            save_model(pruned, tmp_path / "pruned")
    assert not (tmp_path / "pruned").exists() and [p.name for p in tmp_path.iterdir()] == []


def test_stop_takes_effect_within_a_block_and_leaves_the_model_usable(deep_lm):
    from analysis.runtime.cancel import Cancelled
    model = _streamed(deep_lm)
    batches = [torch.randint(1, 1000, (1, 16), generator=torch.Generator().manual_seed(i)) for i in range(4)]
    checks = {"n": 0}

    def stop_soon() -> bool:  # the 3rd check: the first block, after its first batch
        checks["n"] += 1
        return checks["n"] >= 3
    with budget.budget_scope(4 << 20):
        with pytest.raises(Cancelled):
            model.run(batches, cancel=stop_soon)
        assert checks["n"] == 3 and model.skeleton.live == set()
        logits = model(batches[0]).logits   # the same model still runs, and runs right
    whole = models.load_model(str(deep_lm), device="cpu")
    with torch.no_grad():
        want = whole(batches[0], use_cache=False).logits
    assert torch.allclose(logits, want, rtol=1e-5, atol=1e-5)
