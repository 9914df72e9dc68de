"""Issue 41, acceptance: `python -m analysis rank|prune|ppl` on every pairwise flag case (tests/family_cases/flags.py)
exits 0 or refuses in one sentence (exit 2, `error: …`), never with a traceback.

In-process through the CLI's `main` (a subprocess per command would cost its imports 177 times on this 2-core host):
each case's tiny awake model is saved once with the bundled tokenizer's vocabulary, then ranked on 16 tokens, pruned
(l1 key channels, half, 256 evaluation tokens) and its perplexity measured on 64 tokens. An exception escaping `main`
is the traceback a user would see, so it fails the test with its own. The default lane runs two cases per family,
the one farthest from fla's defaults (most fields changed) and the nearest (about 40 s here, 4 s a case); the other
49 are slow (they run in CI).
"""
from __future__ import annotations

import copy
import traceback

import pytest

from family_cases.flags import AXES, all_cases, case_id, make_flag_model, pairwise

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CASES = all_cases()
COMMANDS = (["rank", "--tokens", "16", "--batch", "1"],
            ["prune", "--strategy", "l1", "--ratio", "0.5", "--eval-tokens", "256", "--eval-context", "64"],
            ["ppl", "--context", "32", "--max-tokens", "64"])


def default_lane() -> list[tuple[str, dict]]:
    """Per family, the case farthest from fla's defaults (most fields changed) and the nearest one."""
    out = []
    for family in AXES:
        cases = pairwise(family)
        defaults = {n: v[0] for n, v in AXES[family].items()}
        changed = [sum(c[n] != defaults[n] for n in c) for c in cases]
        out += [(family, cases[changed.index(max(changed))]), (family, cases[changed.index(min(changed))])]
    return out


FAST = {case_id(family, case) for family, case in default_lane()}


def _params():
    return [pytest.param(family, case, id=case_id(family, case),
                         marks=() if case_id(family, case) in FAST else pytest.mark.slow)
            for family, case in CASES]


def one_sentence_refusal(err: str) -> bool:
    """The CLI's refusal: its last line is `error: <one sentence>.` (notices before it are allowed)."""
    last = err.strip().splitlines()[-1] if err.strip() else ""
    body = last.removeprefix("error: ")
    return last.startswith("error: ") and body.endswith(".") and body.count(". ") == 0


def run(capsys, argv: list[str]) -> tuple[int, str]:
    """main(argv) in this process: (exit code, stderr); an exception escaping main fails with its traceback."""
    from analysis.cli.main import main
    try:
        code = main(argv)
    except SystemExit as exc:   # main returns its code; an exit from deeper down is still an exit, not a traceback
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception:  # noqa: BLE001  (what a user would see as a traceback)
        pytest.fail(f"{argv[0]} raised instead of exiting:\n{traceback.format_exc()[-3000:]}")
    return code, capsys.readouterr().err


def test_the_default_lane_has_two_cases_of_every_family():
    assert len(FAST) == 2 * len(AXES) and FAST <= {case_id(f, c) for f, c in CASES}


@pytest.mark.parametrize("family, case", _params())
def test_rank_prune_ppl_exit_0_or_one_sentence(tmp_path, capsys, family, case):
    from analysis.data import corpus as data
    model = make_flag_model(family, case)
    model.resize_token_embeddings(max(model.config.vocab_size, len(data.load_tokenizer())), mean_resizing=False)
    model.save_pretrained(tmp_path / "model")
    del model
    for argv in COMMANDS:
        extra = ["--out", str(tmp_path / "pruned")] if argv[0] == "prune" else []
        code, err = run(capsys, [argv[0], str(tmp_path / "model"), "--device", "cpu", "--quiet", *argv[1:], *extra])
        assert "Traceback" not in err, (argv[0], err[-3000:])
        assert code == 0 or (code == 2 and one_sentence_refusal(err)), (argv[0], code, err[-3000:])
