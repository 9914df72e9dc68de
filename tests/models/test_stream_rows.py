"""Issue 41, item 5: budgets below the largest block. A streamed model reads its input embedding by the rows of its
ids and applies its output head in row slices, both straight from the checkpoint, so `--max-memory` may be smaller
than either matrix; what must fit is the largest unit held whole (a decoder layer), and a budget below that is
refused naming it and its size, not the tokens.

The model: the tiny text Gated DeltaNet at hidden 256, 2 layers, untied — an 8.4 MB embedding and an 8.4 MB head
(the bundled tokenizer's 8,192 tokens), layers of 2.6 MB; budget 7 MiB (below either matrix). The large-scale check
(a 1.55 GB model with a 250 MiB embedding at `--max-memory 200MiB`, its peak measured) is
`benchmarks/stream_scale.py --steps rows`.
"""
from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from analysis.cli.main import main
from analysis.models import budget, load as models
from analysis.models.stream.files import CheckpointFiles
from analysis.models.stream.model import StreamedModel
from family_cases.text_lm import build_tiny
from helpers.numbers import same

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BUDGET = 7 << 20
SMALL = ["--tokens", "16", "--batch", "1", "--stride", "4", "--quiet"]


@pytest.fixture(scope="module")
def wide_lm(tmp_path_factory):
    path = tmp_path_factory.mktemp("wide-lm") / "model"
    build_tiny("gated_deltanet", hidden_size=256, num_hidden_layers=2, num_heads=4, head_dim=64,
               tie_word_embeddings=False).save_pretrained(path)
    return path


def test_rows_are_read_from_the_file_as_stored(wide_lm):
    files = CheckpointFiles(wide_lm)
    name = "model.embeddings.weight"
    with safe_open(wide_lm / "model.safetensors", "pt") as fh:
        whole = fh.get_tensor(name)
    ids = torch.tensor([5, 0, 8191, 5, 77])
    assert torch.equal(files.gather_rows(name, ids), whole[ids])
    assert torch.equal(files.read_rows(name, 100, 164), whole[100:164])
    with pytest.raises(Exception, match="outside the 8,192 rows"):
        files.gather_rows(name, torch.tensor([8192]))
    files.close()


def test_a_budget_below_the_embedding_and_the_head_streams_them_by_rows(wide_lm, tmp_path, capsys, monkeypatch):
    with budget.budget_scope(BUDGET):
        model = models.load_model(str(wide_lm), device="cpu")
    assert isinstance(model, StreamedModel)
    sk = model.skeleton
    embedding, head = sk.unit("model.embeddings"), sk.unit("lm_head")
    assert embedding.nbytes > BUDGET and head.nbytes > BUDGET   # neither matrix fits the budget
    assert sk.by_rows(embedding) and sk.by_rows(head)
    assert model.largest_unit_bytes == max(u.nbytes for u in sk.block_units()) < BUDGET
    model.close()

    reads = []   # every positioned read of a run: none may hold a whole matrix
    original = CheckpointFiles._read_bytes
    monkeypatch.setattr(CheckpointFiles, "_read_bytes",
                        lambda self, name, offset, n: reads.append(n) or original(self, name, offset, n))
    out = {}
    for label, extra in (("whole", []), ("streamed", ["--max-memory", "7MiB"])):
        reads.clear()
        assert main(["rank", str(wide_lm), *SMALL, "--json", str(tmp_path / f"rank-{label}.json"), *extra]) == 0
        assert main(["ppl", str(wide_lm), "--context", "64", "--max-tokens", "256", "--quiet", "--json",
                     str(tmp_path / f"ppl-{label}.json"), *extra]) == 0
        out[label] = capsys.readouterr().err
        if label == "streamed":
            assert reads and max(reads) <= max(u.stored_bytes for u in sk.block_units()) < BUDGET, max(reads)
    assert "streaming: one block at a time (2 blocks" in out["streamed"], out["streamed"]
    rank = [json.loads((tmp_path / f"rank-{k}.json").read_text()) for k in ("whole", "streamed")]
    same(rank[1]["layers"], rank[0]["layers"], "layers", rel=1e-6)
    ppl = [json.loads((tmp_path / f"ppl-{k}.json").read_text()) for k in ("whole", "streamed")]
    assert ppl[0]["tokens"] == ppl[1]["tokens"]
    same(ppl[1]["perplexity"], ppl[0]["perplexity"], "perplexity", rel=1e-5)  # the head's slices: float32 rounding


def test_a_budget_below_the_largest_layer_names_the_layer_not_the_tokens(wide_lm, capsys):
    assert main(["rank", str(wide_lm), *SMALL, "--max-memory", "2MiB"]) == 2
    err = capsys.readouterr().err
    assert "it still holds its largest block (model.layers.0, " in err and "MB in float32), which does not fit " \
        "either" in err and "raise --max-memory above" in err and "tokens" not in err and err.count("\n") == 1, err
