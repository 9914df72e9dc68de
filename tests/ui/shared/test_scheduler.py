"""The compute slot (ui.shared.scheduler): interactive requests first, long jobs yield at pause points (only while
no hook is on a shared model), two long jobs alternate, nesting, release on exceptions. Every wait here waits on
the slot's own state (Scheduler.wait_until) or on an event, never on a fixed sleep."""
import threading

import pytest
import torch

from ui.shared import job_runner
from ui.shared.scheduler import INTERACTIVE, LONG, SCHEDULER, Scheduler

WAIT = 60  # seconds: only a failure ever waits this long


@pytest.fixture(autouse=True)
def no_shared_models_of_earlier_tests(monkeypatch):
    """The process's SCHEDULER guards every model the dashboard's cache holds, and Streamlit's cache outlives an
    AppTest: a streamed model cached by an earlier test would forbid every pause here (and a test waiting for one
    would hang). Each test sees only the models it guards itself, and starts from a slot that can pause."""
    import weakref
    monkeypatch.setattr(SCHEDULER, "_guarded", weakref.WeakSet())
    assert SCHEDULER.quiescent(), "a hook or recurrence observer of an earlier test is still installed"
    assert SCHEDULER.state() == {"holder": None, "depth": 0, "waiting": []}, SCHEDULER.state()


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def queued(sched, n):
    assert sched.wait_until(lambda s: len(s["waiting"]) == n, WAIT), sched.state()


def in_thread(fn, *args):
    t = threading.Thread(target=fn, args=args, daemon=True)
    t.start()
    return t


def long_chunks(sched, party, order, n, started=None):
    with Scheduler.long_work(party):
        for _ in range(n):
            with sched:
                order.append(party)
                if started is not None:
                    started.set()


def test_interactive_requests_go_before_waiting_long_jobs():
    sched, order = Scheduler(), []
    gate = threading.Event()

    def holder():
        with Scheduler.long_work("A"), sched:
            gate.wait(WAIT)
            order.append("A")
    a = in_thread(holder)
    assert sched.wait_until(lambda s: s["holder"] == (LONG, "A"), WAIT)
    b = in_thread(long_chunks, sched, "B", order, 1)
    queued(sched, 1)

    def page():
        with sched:
            order.append("page")
    p = in_thread(page)
    queued(sched, 2)  # the page arrived after B
    gate.set()
    for t in (a, b, p):
        t.join(WAIT)
    assert order == ["A", "page", "B"]


def test_a_long_job_pauses_for_a_page_and_gets_its_nesting_back():
    sched, order = Scheduler(), []
    page_waiting, paused = threading.Event(), []

    def job():
        with Scheduler.long_work("A"), sched:
            with sched:  # a cached call nested in the job's holding
                order.append("job: window 1")
                page_waiting.wait(WAIT)
                paused.append(sched.pause_point())
                order.append("job: window 2")
                assert sched.state()["depth"] == 2
            assert sched.state()["holder"] == (LONG, "A")
    j = in_thread(job)
    assert sched.wait_until(lambda s: s["depth"] == 2, WAIT)

    def page():
        with sched:
            order.append("page")
    p = in_thread(page)
    queued(sched, 1)
    page_waiting.set()
    j.join(WAIT)
    p.join(WAIT)
    assert paused == [True]
    assert order == ["job: window 1", "page", "job: window 2"]
    assert sched.state() == {"holder": None, "depth": 0, "waiting": []}


def test_a_pause_point_without_anyone_waiting_or_outside_a_holding_does_nothing():
    sched = Scheduler()
    assert sched.pause_point() is False  # not holding
    with Scheduler.long_work("A"), sched:
        assert sched.pause_point() is False  # no one waits
    with sched:
        assert sched.pause_point() is False  # interactive work never pauses


def test_two_long_jobs_of_different_sessions_alternate_chunk_by_chunk():
    sched, order = Scheduler(), []
    gate = threading.Event()

    def first():
        with Scheduler.long_work("A"), sched:
            gate.wait(WAIT)
        long_chunks(sched, "A", order, 4)
    a = in_thread(first)
    assert sched.wait_until(lambda s: s["holder"] == (LONG, "A"), WAIT)
    b = in_thread(long_chunks, sched, "B", order, 4)
    queued(sched, 1)
    gate.set()
    a.join(WAIT)
    b.join(WAIT)
    # B waited while A held the slot, so B goes first; then each release hands the slot to the other session
    assert order == ["B", "A"] * 4


def test_a_long_job_yields_to_another_long_job_at_a_pause_point_after_its_quantum():
    clock = FakeClock()
    sched, order = Scheduler(quantum=1.0, clock=clock), []
    checks, b_waiting = threading.Event(), threading.Event()
    results = []

    def a():
        with Scheduler.long_work("A"), sched:
            b_waiting.wait(WAIT)
            results.append(sched.pause_point())  # within its quantum: keeps the slot
            clock.now = 1.5
            results.append(sched.pause_point())  # past it: B goes
            order.append("A")
            checks.set()
    ta = in_thread(a)
    assert sched.wait_until(lambda s: s["holder"] == (LONG, "A"), WAIT)
    tb = in_thread(long_chunks, sched, "B", order, 1)
    queued(sched, 1)
    b_waiting.set()
    ta.join(WAIT)
    tb.join(WAIT)
    assert results == [False, True] and order == ["B", "A"]


def test_the_slot_is_free_again_after_an_exception_at_any_depth():
    sched = Scheduler()
    with pytest.raises(ValueError):
        with sched:
            with sched:
                raise ValueError("a bug inside a cached call")
    assert sched.state() == {"holder": None, "depth": 0, "waiting": []}
    got = threading.Event()
    t = in_thread(lambda: (sched.acquire(), got.set(), sched.release()))
    assert got.wait(WAIT)
    t.join(WAIT)
    with pytest.raises(RuntimeError):
        sched.release()  # not held: a bug, said at once


def test_a_job_does_not_pause_while_a_hook_is_on_a_shared_model():
    """The reason the slot exists: another session's forward pass must never run through this job's hooks."""
    sched, order = Scheduler(), []
    shared = sched.guard(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)))
    page_waiting, results = threading.Event(), []

    def job():
        with Scheduler.long_work("A"), sched:
            handle = shared[1].register_forward_pre_hook(lambda *_: None)
            page_waiting.wait(WAIT)
            results.append(sched.pause_point())  # hooked: runs on
            handle.remove()
            order.append("job's hooks removed")
            results.append(sched.pause_point())  # quiescent: the page goes
            order.append("job")

    def page():
        with sched:
            order.append("page")
            shared(torch.ones(1, 4))
    j = in_thread(job)
    assert sched.wait_until(lambda s: s["holder"] == (LONG, "A"), WAIT)
    p = in_thread(page)
    queued(sched, 1)
    page_waiting.set()
    j.join(WAIT)
    p.join(WAIT)
    assert results == [False, True]
    assert order == ["job's hooks removed", "page", "job"]


def test_a_patched_forward_or_a_streamed_model_also_blocks_pausing():
    sched = Scheduler()
    shared = sched.guard(torch.nn.Linear(2, 2))
    assert sched.quiescent()
    shared.forward = lambda x: x
    assert not sched.quiescent()
    del shared.forward
    assert sched.quiescent()

    class Streamed:
        streamed = True
    streamed = sched.guard(Streamed())
    assert not sched.quiescent()
    del streamed


def test_a_running_job_hands_the_process_slot_to_a_page_at_its_next_report():
    """Through the job runner: a job whose work holds the slot for a long loop of reports (as Verify's
    measurements do) lets a page's request in at its next report, then finishes."""
    inside, stop = threading.Event(), threading.Event()

    def work(job):
        with SCHEDULER:
            inside.set()
            while not stop.is_set():
                job.report(0.5, "measuring a window")
        return "done"
    job = job_runner.Job("long", "k", "a long job")
    assert job_runner.start(job, work)
    assert inside.wait(WAIT)
    with SCHEDULER:  # this thread is not a job's: an interactive request
        assert SCHEDULER.state()["holder"][0] == INTERACTIVE
        stop.set()
    job.thread.join(WAIT)
    assert job.state == "done" and job.result == "done"
    assert SCHEDULER.state() == {"holder": None, "depth": 0, "waiting": []}


def test_a_job_measuring_a_shared_model_lets_a_page_in_between_its_windows():
    """As Verify's measurements do: a job holds the slot around a whole perplexity measurement of the shared (tiny,
    real) model; a page's forward pass on that model gets the slot at the next window, while the job still runs."""
    from analysis.data import corpus
    from analysis.shrink.prune_workflow import Evaluation
    from family_cases.text_lm import build_tiny
    model = SCHEDULER.guard(build_tiny("delta_net").eval())
    tok = corpus.load_tokenizer()
    many_windows = Evaluation(context=32, max_tokens=32 * 5000, latency=False)  # minutes if it never paused
    inside = threading.Event()

    def work(job):
        with SCHEDULER:
            inside.set()
            return many_windows.measure(model, tok, cancel=job.cancelled)
    job = job_runner.Job("verify-like", "k", "a long measurement")
    assert job_runner.start(job, work)
    assert inside.wait(WAIT)
    with SCHEDULER, torch.no_grad():  # the page's own forward pass on the shared model
        still_measuring = job.running
        logits = model(torch.arange(8).unsqueeze(0)).logits
    job.stop()
    job.thread.join(WAIT)
    assert still_measuring and logits.shape[:2] == (1, 8)
    assert job.state == "stopped", (job.state, job.error)


def test_a_cached_streamed_model_blocks_pausing_only_while_a_pass_over_it_runs(tmp_path):
    """A streamed model in the server's cache counted as busy for as long as it was cached, so a long job never
    paused inside a point while one was loaded. Now (a real streamed model, every parameter awake): while a pass
    over it runs, a job runs on (a page's pass on it would wait on the paused job's skeleton); once the pass is
    over, the job pauses, and the page's own pass over the same streamed model runs in the pause."""
    from analysis.models import budget, load as models
    from analysis.models.stream.model import StreamedModel
    from family_cases.flags import unawake, wake
    from family_cases.text_lm import build_tiny
    built = build_tiny("delta_net", num_hidden_layers=6)
    wake(built, 1)
    assert unawake(built) == []
    built.save_pretrained(tmp_path / "model")
    weights = sum(p.numel() * p.element_size() for p in built.parameters())
    with budget.budget_scope(int(weights * 0.8)):
        model = models.load_model(str(tmp_path / "model"), device="cpu")
    assert isinstance(model, StreamedModel)
    sched = Scheduler()
    sched.guard(model)
    assert sched.quiescent()  # cached, no pass running: nothing to wait for
    ids = torch.arange(8).unsqueeze(0)
    page_waiting, results, order, seen = threading.Event(), [], [], []

    def job():
        with Scheduler.long_work("A"), sched, torch.no_grad():
            page_waiting.wait(WAIT)
            model.run([ids], progress=lambda *_: results.append(sched.pause_point()))  # inside the pass: runs on
            order.append("job's pass done")
            results.append(sched.pause_point())  # only cached now: the page goes
            order.append("job")

    def page():
        with sched, torch.no_grad():
            order.append("page")
            seen.append(model(ids).logits)
    j = in_thread(job)
    assert sched.wait_until(lambda s: s["holder"] == (LONG, "A"), WAIT)
    p = in_thread(page)
    queued(sched, 1)
    page_waiting.set()
    j.join(WAIT)
    p.join(WAIT)
    assert len(results) == model.blocks + 1 and results == [False] * model.blocks + [True]
    assert order == ["job's pass done", "page", "job"]
    assert seen[0].shape[:2] == (1, 8) and torch.isfinite(seen[0]).all()
    assert sched.quiescent() and not model.running
