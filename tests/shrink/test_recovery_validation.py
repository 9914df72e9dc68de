"""Issue 29 items 6 and 8: a recovery's validation checks are sized to the run (not 4,096 tokens for 4 steps),
and the change it keeps carries a paired standard error over the same validation windows."""
from __future__ import annotations

import math

import pytest

from analysis.data import corpus as data
from analysis.shrink.prune import prune
from analysis.models.key_plan import plan_key_dims
from analysis.shrink.recovery import EVAL_SHARE, RecoverySettings, recover
from family_cases.text_lm import build_tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_validation_tokens_follow_the_run():
    tiny = RecoverySettings(steps=4, eval_every=10, batch=8, seq_len=256)  # the "4 tiny steps"
    assert tiny.checks == 2 and tiny.validation_tokens == 4 * 256       # 4 windows, not 4,096 tokens
    page = RecoverySettings(steps=20, eval_every=10, batch=8, seq_len=256)  # the Prune page's defaults
    assert page.validation_tokens == 13 * 256                            # ¼ of 40,960 training tokens over 3 checks
    assert page.checks * page.validation_tokens <= EVAL_SHARE * 20 * 8 * 256
    assert RecoverySettings(steps=100).validation_tokens == 4096          # the CLI's defaults: as before
    assert RecoverySettings(steps=4, eval_tokens=512).validation_tokens == 512  # asked for: as asked
    assert RecoverySettings(steps=4).record()["eval_tokens"] == 4 * 256   # saved with the size it used


def test_the_kept_change_carries_its_paired_standard_error():
    tok = data.load_tokenizer()
    model = build_tiny("gated_deltanet")
    pruned = prune(model, "l1", plan_key_dims(model, ratio=0.5), None).model
    out = recover(pruned, tok, RecoverySettings(method="qk", steps=2, lr=1e-3, batch=2, seq_len=32, eval_every=1,
                                                eval_tokens=128))
    assert [len(v["windows"]) for v in out.validation] == [4, 4, 4]      # 128 tokens in windows of 32
    change = out.metadata()["validation_change"]
    assert change["windows"] == 4 and change["tokens"] == 128 and math.isfinite(change["se"]) and change["se"] >= 0
    start = out.validation[0]["perplexity"]
    kept = next(v["perplexity"] for v in out.validation if v["step"] == out.kept_step)
    # equal windows (32 scored tokens each): the mean of the per-window differences is the change in log perplexity
    assert change["delta_log_ppl"] == pytest.approx(math.log(kept / start), rel=1e-9, abs=1e-12)
