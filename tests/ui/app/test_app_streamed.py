"""Issue 30 in the dashboard: the sidebar's Max memory field; a model over it is streamed, the Model page says so in
the CLI's words (and that recovery and training need the whole model), and the States, Query noise, Channel
importance and Prune pages measure it (the Prune page's recovery is one sentence saying why not); a budget that
does not parse is one sentence and the app keeps working."""
import pytest

from analysis.models import budget
from family_cases.text_lm import build_tiny
from helpers.app import assert_clean, charts, start

pytestmark = pytest.mark.usefixtures("one_torch_thread", "navigation_only")


@pytest.fixture(scope="module")
def deep_lm(tmp_path_factory):
    path = tmp_path_factory.mktemp("deep-lm-app") / "model"
    build_tiny("delta_net", num_hidden_layers=12).save_pretrained(path, max_shard_size="1MB")
    yield path
    budget.set_budget(None)  # the sidebar sets this thread's budget at every rerun


def test_max_memory_streams_the_model_and_the_pages_say_so(monkeypatch, deep_lm):
    at = start(monkeypatch, deep_lm)
    assert_clean(at)
    assert not [i for i in at.info if "streaming" in i.value]
    at.number_input(key="w:tokens").set_value(32)
    at.number_input(key="w:sequences").set_value(2)
    at.text_input(key="w:max_memory").set_value("4MiB").run()
    assert_clean(at)
    [note] = [i.value for i in at.info if i.value.startswith("streaming:")]
    assert note.startswith("streaming: one block at a time (12 blocks, 5.3 MB on disk, largest block ") and \
        "budget 4.0 MiB" in note and note.endswith("Recovery and training need the whole model in memory.")
    assert at.table[0].value.loc["Layers", "Value"] == "12"
    at.switch_page("pages/states.py").run()
    assert_clean(at)
    assert [s["data"][0]["type"] for s in charts(at)] == ["heatmap", "scatter", "scatter"]


def test_a_max_memory_that_does_not_parse_is_one_sentence(monkeypatch, deep_lm):
    at = start(monkeypatch, deep_lm)
    at.text_input(key="w:max_memory").set_value("lots").run()
    assert [e.value for e in at.error] == [
        "Max memory 'lots' is not a size; write a number and a unit, e.g. 4GiB, 500MiB or 3GB (KiB/MiB/GiB/TiB are "
        "powers of 1024, kB/MB/GB/TB of 1000)."]
    assert not at.exception and at.table[0].value.loc["Layers", "Value"] == "12"  # loaded whole, as by default


def test_a_job_shows_the_blocks_of_a_streamed_pass_and_stops_at_the_next_one(deep_lm):
    import torch

    from analysis.models import load as models
    from analysis.models.stream.model import reporting_blocks
    from analysis.runtime.cancel import Cancelled
    from ui.shared.job_runner import Job
    with budget.budget_scope(4 << 20):
        model = models.load_model(str(deep_lm), device="cpu")
    job = Job("states", "key", "label")
    job.text = "collecting states"
    seen = []

    def report(*args):
        job.blocks(*args)
        seen.append(job.text)
        if len(seen) == 2:
            job.stop()  # Stop pressed during the second block
    ids = torch.randint(1, 1000, (1, 16), generator=torch.Generator().manual_seed(0))
    with budget.budget_scope(4 << 20), reporting_blocks(report), pytest.raises(Cancelled):
        model.run([ids])
    assert len(seen) == 2 and seen[0].startswith("collecting states · streaming block 1/12, 0.00 GB read, about ")
    assert model.skeleton.live == set()


def test_the_measuring_pages_work_streamed_and_recovery_says_why_not(monkeypatch, deep_lm):
    """Query noise, Channel importance and Prune (prune, then perplexity before and after) on the streamed model;
    the Prune page's recovery is one sentence saying it needs the whole model."""
    from helpers.app import click, one_sentence, open_page
    at = open_page(monkeypatch, deep_lm, "pages/model.py")
    at.number_input(key="w:tokens").set_value(32)
    at.number_input(key="w:sequences").set_value(2)
    at.session_state["calib_tokens"] = 16  # 2 × 16 = 32 tokens, the key dim: what a 4 MiB budget holds
    at.text_input(key="w:max_memory").set_value("4MiB").run()
    assert_clean(at)
    assert [i for i in at.info if i.value.startswith("streaming:")]
    at.switch_page("pages/query_noise.py").run()
    assert_clean(at)
    assert charts(at)
    at.switch_page("pages/importance.py").run()
    assert_clean(at)
    assert any(s["layout"]["title"]["text"] == "Jaccard overlap of the kept sets" for s in charts(at))
    at.switch_page("pages/prune.py").run()
    assert_clean(at)
    at.selectbox(key="w:prune_strategy").set_value("l1")
    at.checkbox(key="w:prune_latency").uncheck().run()  # the kernel timing's 2 × 512 tokens need more than 4 MiB
    click(at, "prune_run")
    table = at.table[1].value
    assert any(r.startswith("perplexity (Shakespeare") for r in table.index)
    for key, value in {"w:recover_steps": 2, "w:recover_batch": 2, "w:recover_seq": 32}.items():
        at.number_input(key=key).set_value(value)
    at.button(key="recover_run").click().run()
    assert not at.exception
    [error] = [e.value for e in at.error]
    assert one_sentence(error) and error.startswith("Recovery trains with gradients through the whole model at once, "
                                                    "so it is never run one block at a time"), error
