"""Issue 40: `ppl --text FILE --role R` scores one role of a user's own text (whole documents in order, the split
analysis.data.roles makes), labelled with the role and its documents; --role without --text is one sentence."""
import json

import pytest

from analysis.cli.main import main
from analysis.data.roles import TextRole, text_roles
from analysis.models import load as models

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOPICS = ("kings and queens at court", "ships and storms at sea", "roses in a morning garden", "bells in a city square",
          "snow on winter hills", "lamps in a quiet library")


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("roles") / "corpus.txt"
    path.write_text("\n\n".join(f"Document {i}: " + f"a story of {t}, told again and again. " * 6
                                for i, t in enumerate(TOPICS)))
    return path


def scored(tmp_path, lm_dir, *extra) -> dict:
    out = tmp_path / "ppl.json"
    assert main(["ppl", str(lm_dir), "--context", "16", "--device", "cpu", "--json", str(out), *extra]) == 0
    return json.loads(out.read_text())


def test_each_role_scores_its_own_documents_and_says_which(tmp_path, lm_dir, text_file):
    whole = scored(tmp_path, lm_dir, "--text", str(text_file))
    roles = {r: scored(tmp_path, lm_dir, "--text", str(text_file), "--role", r.value) for r in TextRole}
    tok = models.load_tokenizer(models.load_model(str(lm_dir), device="cpu"))
    held = text_roles(text_file.read_text(), tok)
    for role, got in roles.items():
        docs = held[role]
        assert got["role"] == role.value
        assert f"{role.value} document" in got["dataset"] and f"of {len(TOPICS)}" in got["dataset"], got["dataset"]
        assert f"{docs[-1] + 1}" in got["dataset"]
        assert 0 < got["tokens"] < whole["tokens"]
    assert sum(len(d) for d in held.values()) == len(TOPICS)          # every document in exactly one role
    assert len({i for d in held.values() for i in d}) == len(TOPICS)
    assert sum(g["tokens"] for g in roles.values()) <= whole["tokens"] + 3 * 16
    assert len({round(g["perplexity"], 6) for g in roles.values()}) == 3  # three different texts were scored


def test_role_without_text_is_one_sentence(capsys, lm_dir):
    assert main(["ppl", str(lm_dir), "--role", "held-out", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --role picks the documents of your own text") and "Traceback" not in err
