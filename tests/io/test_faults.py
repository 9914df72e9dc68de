"""Issue 25 (build 2): the fault-injection suite, in the manner of SQLite's crash tests.

For each save path the test first runs the path once in a forked child while counting its filesystem steps
(file opens for writing, renames, renameat2, mkdir/rmdir, unlink, chmod, fsync, safetensors' and the
tokenizer's own writes), then, for k = 1..n, starts from the same scene again and kills a child with
`os._exit(137)` right before step k (a real death: no except/finally of ours runs). After each kill:
- the target name holds the old or the new result, whole (marker, config, every listed file, safetensors
  headers that fit their files; each distinct model state is also loaded and run once); a streamed model's
  sharded save (one shard after another, then the index) is among the paths;
- nothing the tool did not write changed (foreign files and folders beside it, some named like our leftovers);
- a re-run of the same action succeeds and leaves no leftovers (no .partial, .replaced-*, journal or temp).
The model is loaded once in the parent; children are forks (torch at one thread), so a kill costs little.
Run with -s to see the kill count of every path.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

import pytest
import torch

from analysis.models import checkpoint
from analysis.data import corpus as data
from analysis.cli.main import main
from analysis.io import swap, writes
from family_cases.text_lm import build_tiny

pytestmark = pytest.mark.faults

KILLED = 137
STEP_EVENTS = {"os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.truncate", "os.link", "os.symlink",
               "analysis.io.renameat2"}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
TINY_TRAIN = ["--task", "recall", "--hidden-size", "32", "--layers", "1", "--heads", "1", "--head-dim", "16",
              "--batch", "2", "--warmup", "1", "--eval-every", "1", "--checkpoint-every", "1", "--recall-pairs", "2",
              "--recall-keys", "8", "--device", "cpu", "--quiet"]
KILL_COUNTS: dict[str, int] = {}
TIMES: dict[str, float] = {}


# ---- the injector (installed in a forked child only) ----------------------------------------------------

class Injector:
    """Counts filesystem steps under `root`; with `kill_at`, dies right before that step."""

    def __init__(self, root: Path, kill_at: int | None):
        self.root, self.kill_at, self.steps = str(root), kill_at, []

    def step(self, what: str) -> None:
        self.steps.append(what)
        if self.kill_at is not None and len(self.steps) >= self.kill_at:
            os._exit(KILLED)

    def _ours(self, path, dir_fd=None) -> bool:
        if isinstance(path, int):
            return False
        path = os.fsdecode(path)
        if dir_fd not in (None, -1) and not os.path.isabs(path):
            return True  # shutil.rmtree's relative steps (only our removals use dir_fd)
        return os.path.abspath(path).startswith(self.root)

    def audit(self, event: str, args) -> None:
        if event == "open":
            path, mode, flags = args
            writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & WRITE_FLAGS)
            if writing and self._ours(path):
                self.step(f"open {os.path.basename(os.fsdecode(path))}")
        elif event in STEP_EVENTS:
            dir_fd = args[-1] if event in ("os.remove", "os.rmdir", "os.mkdir", "os.chmod") else None
            if event == "os.mkdir" and dir_fd in (None, -1) and os.path.isdir(args[0]):
                return  # makedirs(exist_ok=True) on a folder that exists: changes nothing, so not a step
            if self._ours(args[0], dir_fd):
                self.step(f"{event} {os.path.basename(os.fsdecode(args[0]))}")

    def install(self) -> None:
        import safetensors.torch
        from transformers import tokenization_utils_tokenizers as tok_utils
        sys.addaudithook(self.audit)
        fsync, serialize, save_tok = os.fsync, safetensors.torch.serialize_file, \
            tok_utils.TokenizersBackend._save_pretrained

        def counted_fsync(fd):
            self.step("fsync")
            return fsync(fd)

        def counted_serialize(tensors, filename, metadata=None):  # Rust: invisible to the audit hook
            self.step(f"safetensors {os.path.basename(filename)}")
            return serialize(tensors, filename, metadata=metadata)

        def counted_tokenizer(tokenizer, *args, **kwargs):  # tokenizer.json, also written in Rust
            self.step("tokenizer.json")
            return save_tok(tokenizer, *args, **kwargs)
        os.fsync = counted_fsync
        safetensors.torch.serialize_file = counted_serialize
        tok_utils.TokenizersBackend._save_pretrained = counted_tokenizer


def in_child(action, root: Path, log: Path, kill_at: int | None = None, count: Path | None = None,
             env: dict | None = None) -> int:
    """Run action() in a forked child (injector installed when counting or killing); its exit code."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 99
        try:
            sys.stdout = sys.stderr = open(log, "w", buffering=1)
            os.environ.update(env or {})
            injector = Injector(root, kill_at)
            if kill_at is not None or count is not None:
                injector.install()
            code = action()
            code = code if isinstance(code, int) else 0
            if count is not None:
                count.write_text(json.dumps(injector.steps))
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


# ---- what a scene holds, and what may be left ---------------------------------------------------------

def digest(path: Path) -> str:
    h = hashlib.sha256()
    if path.is_symlink():
        h.update(b"link:" + os.readlink(path).encode())
    elif path.is_file():
        h.update(path.read_bytes())
    elif path.is_dir():
        for child in sorted(path.rglob("*")):
            h.update(str(child.relative_to(path)).encode() + b"|" + digest(child).encode())
    return h.hexdigest()


LEFTOVER_MARKS = (".partial", ".replaced-", swap.JOURNAL_SUFFIX, writes.TMP_FILE_SUFFIX, "probe", ".tmp")


def leftovers(folder: Path, foreign: set[str]) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in foreign and any(m in p.name for m in LEFTOVER_MARKS))


def plant_foreign(folder: Path, target: str) -> set[str]:
    """Things the tool did not write, next to the target; two are named like its leftovers (no marker)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes.txt").write_text("the user's notes")
    (folder / "user-model").mkdir()
    (folder / "user-model" / "weights.bin").write_bytes(b"\x01" * 64)
    mine = folder / f".{target}.mine0000.partial"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    (folder / f".{target}.replaced-0000beef").write_text("a file, not ours")
    return {"notes.txt", "user-model", mine.name, f".{target}.replaced-0000beef"}


def whole_model(folder: Path) -> bool:
    """A model directory as the tool finishes it: a final marker listing exactly its files, a config, and
    safetensors whose headers fit their files."""
    try:
        record = json.loads((folder / writes.MARKER).read_text())
        files = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()
                 and not p.name.endswith(writes.TMP_FILE_SUFFIX)} - {writes.MARKER}  # (a killed write_text's temp)
        if record.get("written_by") != writes.WRITER or record.get("state") == "partial" \
                or set(record["files"]) != files:
            return False
        json.loads((folder / "config.json").read_text())
        weights = [folder / f for f in files if f.endswith(".safetensors")]
        return bool(weights) and all(checkpoint.header_entries(w) is not None for w in weights)
    except Exception:
        return False


RAN: set[str] = set()


def runs(folder: Path, checkpoint_dir: bool = False) -> None:
    """Each distinct model state is loaded (safetensors only) and run once: a forward gives finite logits."""
    key = digest(folder)
    if key in RAN:
        return
    from analysis.models.load import load_model
    from analysis.train.trainer import _load_checkpoint_model
    model = _load_checkpoint_model(folder) if checkpoint_dir else load_model(str(folder), device="cpu")
    vocab = model.config.vocab_size
    with torch.no_grad():
        logits = model(torch.arange(8).remainder(vocab)[None]).logits
    assert torch.isfinite(logits).all()
    RAN.add(key)


# ---- the loop ----------------------------------------------------------------------------------------

def unchanged(root: Path, before: dict) -> None:
    for folder, names in before.items():
        assert {n: digest(root / folder / n) for n in names} == names, f"a file the tool did not write changed in {folder}"


def kill_every_step(name: str, tmp_path: Path, make_scene, action, rerun, check, watched, env=None) -> int:
    """make_scene(root) -> foreign names per watched folder ({folder: names}); action/rerun(root) -> exit code;
    check(root, after_rerun) asserts old-or-new; watched(root) -> the folders that must end without leftovers."""
    started = time.perf_counter()
    template = tmp_path / "template"
    foreign = make_scene(template)
    before = {f: {n: digest(template / f / n) for n in names} for f, names in foreign.items()}
    log = tmp_path / "child.log"

    def fresh() -> Path:
        root = tmp_path / "scene"
        if root.exists():
            shutil.rmtree(root)
        shutil.copytree(template, root, symlinks=True)
        return root

    root = fresh()
    count = tmp_path / "steps.json"
    assert in_child(lambda: action(root), root, log, count=count, env=env) == 0, log.read_text()
    steps = json.loads(count.read_text())
    assert steps, "no filesystem step was seen"
    check(root, True)
    for k in range(1, len(steps) + 1):
        root = fresh()
        code = in_child(lambda: action(root), root, log, kill_at=k, env=env)
        assert code == KILLED, f"{name}: step {k} ({steps[k - 1]}) was not reached: {code}\n{log.read_text()}"
        try:
            check(root, False)
            unchanged(root, before)
            assert in_child(lambda: rerun(root), root, log, env=env) == 0, log.read_text()
            check(root, True)
            unchanged(root, before)
            for folder in watched(root):
                assert leftovers(folder, set(foreign.get(str(folder.relative_to(root)), ()))) == [], \
                    f"leftovers after the re-run: {os.listdir(folder)}"
        except AssertionError as exc:
            raise AssertionError(f"{name}: killed before step {k} of {len(steps)} ({steps[k - 1]}): {exc}") from None
    KILL_COUNTS[name] = len(steps)
    TIMES[name] = round(time.perf_counter() - started, 1)
    print(f"\n{name}: killed at each of {len(steps)} filesystem steps: {', '.join(steps)}")
    return len(steps)


# ---- shared, loaded once ------------------------------------------------------------------------------

@pytest.fixture(scope="module", autouse=True)
def one_thread_and_cached_text():
    """Forks need one torch thread; the test split's tokens are encoded once here, not in every child."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    real, memo = data.encode, {}

    def encode(text, tokenizer):
        key = (hash(text), len(tokenizer))
        if key not in memo:
            memo[key] = real(text, tokenizer)
        return memo[key].clone()
    data.encode = encode
    encode(data.load_text("test"), data.load_tokenizer())  # in the parent, so every fork inherits it
    yield
    data.encode = real
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("source") / "tiny"
    build_tiny("delta_net").save_pretrained(path)
    assert main(prune_args(path, path.parent / "warm-up", "0.5")) == 0  # lazy imports done once, not per fork
    return path


def prune_args(source: Path, out: Path, ratio: str) -> list[str]:
    return ["prune", str(source), "--strategy", "l1", "--ratio", ratio, "--eval-tokens", "257", "--device", "cpu",
            "--quiet", "--out", str(out)]


def head_k_dims(folder: Path):
    return json.loads((folder / "config.json").read_text()).get("head_k_dims") or \
        json.loads((folder / "pruning.json").read_text())["head_k_dims"]


# ---- the paths ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["new", "overwrite"])
def test_prune_out_survives_a_kill_at_every_step(tmp_path, source, mode):
    def scene(root):
        foreign = plant_foreign(root / "outs", "pruned")
        if mode != "new":
            assert main(prune_args(source, root / "outs" / "pruned", "0.25")) == 0
        return {"outs": foreign}
    old = None

    def action(root):
        extra = [] if mode == "new" else ["--overwrite"]
        return main(prune_args(source, root / "outs" / "pruned", "0.5") + extra)

    def rerun(root):  # what the user does next: the same command (with --overwrite once the model exists)
        out = root / "outs" / "pruned"
        return main(prune_args(source, out, "0.5") + (["--overwrite"] if out.exists() or mode != "new" else []))

    def check(root, finished):
        nonlocal old
        out = root / "outs" / "pruned"
        if not out.exists():  # only before a first save
            assert not finished and mode == "new", "the target name is missing"
            return
        assert whole_model(out), f"{out} is not whole: {sorted(os.listdir(out))}"
        dims = head_k_dims(out)
        if old is None and mode != "new":
            old = head_k_dims(tmp_path / "template" / "outs" / "pruned")
        assert dims != old if finished else True
        runs(out)
    kill_every_step(f"prune --out ({mode})", tmp_path, scene, action, rerun, check, lambda root: [root / "outs"])


@pytest.mark.parametrize("journal", [False, True], ids=["exchange", "journal"])
def test_dashboard_save_survives_a_kill_at_every_step(tmp_path, source, monkeypatch, journal):
    """The Prune page's Save: save_model(..., output_target(name), overwrite=True) under the output root; also
    with the journal that replaces RENAME_EXCHANGE where the OS lacks it (the name is missing only between its
    two renames, with the journal written, and the next save finishes or undoes it)."""
    from analysis.models.load import load_model, load_tokenizer
    from analysis.shrink.prune import prune
    from analysis.shrink.prune_run import PruneRun
    from analysis.shrink.prune_workflow import Evaluation
    from analysis.models.key_plan import plan_key_dims
    from analysis.io.model_dir import save_model
    model = load_model(str(source), device="cpu")
    tokenizer = load_tokenizer(model)
    result = prune(model, "l1", plan_key_dims(model, ratio=0.5))
    run = PruneRun.of(result, model, str(source), 0.5, {}, {}, Evaluation())  # the page's Save writes a run

    def scene(root):
        foreign = plant_foreign(root / "outputs", "dn-half")
        older = prune(model, "l1", plan_key_dims(model, ratio=0.25))
        save_model(older.model, root / "outputs" / "dn-half", tokenizer=tokenizer, metadata={"old": True})
        return {"outputs": foreign}

    def action(root):
        os.environ[writes.OUTPUT_ROOT_ENV] = str(root / "outputs")
        run.save(writes.output_target("dn-half", False), tokenizer, overwrite=True)
        return 0

    def check(root, finished):
        out = root / "outputs" / "dn-half"
        if journal and not finished and not out.exists() and swap.journal_path(out).exists():
            return
        assert out.is_dir() and whole_model(out), "the saved name is missing or not whole"
        is_new = "old" not in json.loads((out / "pruning.json").read_text())
        assert is_new or not finished
        runs(out)
    if journal:
        monkeypatch.setattr(swap, "FORCE_JOURNAL", True)  # inherited by the forked children
    kill_every_step(f"dashboard Save (overwrite, {'journal' if journal else 'exchange'})", tmp_path, scene, action,
                    action, check, lambda root: [root / "outputs"])


def test_train_checkpoint_and_final_model_survive_a_kill_at_every_step(tmp_path, monkeypatch):
    """A resumed 2-step run: the checkpoint of step 1 is replaced by step 2's, then the final model replaced."""
    def args(root, *extra):
        return ["train", "--out", str(root / "final"), "--work", str(root / "work"), "--steps", "2", *TINY_TRAIN,
                *extra]

    def scene(root):
        foreign = plant_foreign(root, "final")
        foreign_work = plant_foreign(root / "work", "checkpoint")
        assert main(args(root, "--stop-at", "1")) == 0
        return {".": foreign, "work": foreign_work}

    def action(root):
        os.chdir(root)
        return main(args(root, "--resume"))

    def check(root, finished):
        ckpt, final = root / "work" / "checkpoint", root / "final"
        assert whole_model(ckpt) and whole_model(final), "the checkpoint or the final model is missing or not whole"
        step = json.loads((ckpt / "trainer_state.json").read_text())["step"]
        done = json.loads((final / "training.json").read_text())["steps_done"]
        assert step in (1, 2) and done in (1, 2) and (not finished or step == done == 2), (step, done)
        runs(ckpt, checkpoint_dir=True)
        runs(final)
    kill_every_step("train (checkpoint + final model)", tmp_path, scene, action, action, check,
                    lambda root: [root, root / "work"])


def test_json_file_survives_a_kill_at_every_step(tmp_path):
    from analysis.io.json_out import write_json

    def scene(root):
        foreign = plant_foreign(root, "result.json")
        (root / "result.json").write_text(json.dumps({"version": "old"}))
        return {".": foreign}

    def action(root):
        write_json({"version": "new", "values": list(range(100))}, str(root / "result.json"))
        return 0

    def check(root, finished):
        version = json.loads((root / "result.json").read_text())["version"]
        assert version == "new" if finished else version in ("old", "new")
    kill_every_step("--json file", tmp_path, scene, action, action, check, lambda root: [root])


def test_model_card_survives_a_kill_at_every_step(tmp_path, monkeypatch):
    from analysis.inspect import model_card

    def scene(root):
        foreign = plant_foreign(root, "model")
        assert main(["train", "--out", str(root / "model"), "--work", str(root / "work"), "--steps", "1",
                     *TINY_TRAIN]) == 0
        shutil.rmtree(root / "work")
        (root / "model" / "README.md").write_text("# old card\n")   # as an earlier `card` run left them
        (root / "model" / "card.json").write_text(json.dumps({"name": "old"}))
        writes.record_written(root / "model", ["README.md", "card.json"])
        return {".": foreign}
    card = None

    def action(root):
        model_card.build_card = lambda source: card  # the measurements are not what is tested here
        return main(["card", str(root / "model")])

    def check(root, finished):
        model = root / "model"
        assert whole_model(model), "the model directory is no longer whole"
        readme, numbers = (model / "README.md").read_text(), json.loads((model / "card.json").read_text())
        assert readme in ("# old card\n", model_card.render(card)) and numbers in ({"name": "old"}, card)
        assert not finished or (readme == model_card.render(card) and numbers == card)
    probe = tmp_path / "probe"
    assert main(["train", "--out", str(probe / "model"), "--work", str(probe / "work"), "--steps", "1",
                 *TINY_TRAIN]) == 0
    card = json.loads(json.dumps(model_card.build_card(str(probe / "model"))))
    card["name"] = "model"
    kill_every_step("model card", tmp_path, scene, action, action, check, lambda root: [root, root / "model"])


def test_streamed_sharded_save_survives_a_kill_at_every_step(tmp_path, source):
    """Issue 30: a model over its memory budget is pruned as a view of its sharded checkpoint and saved one unit at a
    time into shards (analysis.io.shards): each shard's header, its tensors, its fsync, then the index — through the
    same marker, swap and reclaim as every model save. The old or the new model, whole, after a kill at any step."""
    from analysis.models import budget
    from analysis.models.load import load_model
    from analysis.models.stream.model import StreamedModel
    from analysis.shrink.prune import prune
    from analysis.models.key_plan import plan_key_dims
    from analysis.io.model_dir import save_model
    sharded = tmp_path / "sharded-source"
    build_tiny("delta_net", num_hidden_layers=6).save_pretrained(sharded, max_shard_size="600KB")
    with budget.budget_scope(3 << 20):  # 3 MiB for 3.4 MB of weights: streamed
        model = load_model(str(sharded), device="cpu")
        assert isinstance(model, StreamedModel)
        new, old = (prune(model, "l1", plan_key_dims(model, ratio=r)).model for r in (0.5, 0.25))

    def scene(root):
        foreign = plant_foreign(root / "outs", "pruned")
        with budget.budget_scope(3 << 20):
            save_model(old, root / "outs" / "pruned", metadata={"old": True})
        return {"outs": foreign}

    def action(root):
        with budget.budget_scope(3 << 20):
            save_model(new, root / "outs" / "pruned", metadata={"new": True}, overwrite=True)
        return 0

    def check(root, finished):
        out = root / "outs" / "pruned"
        assert whole_model(out), f"{out} is not whole: {sorted(os.listdir(out))}"
        assert len(list(out.glob("model-*.safetensors"))) > 1 and (out / "model.safetensors.index.json").exists()
        is_new = "new" in json.loads((out / "pruning.json").read_text())
        assert is_new or not finished
        runs(out)
    kill_every_step("streamed sharded save (overwrite)", tmp_path, scene, action, action, check,
                    lambda root: [root / "outs"])


def point_cache_seam(folder: Path) -> None:
    """Where the one point cache (analysis.io.point_cache) keeps its entries."""
    import analysis.io.point_cache as point_cache
    point_cache.CACHE_DIR = folder


def test_sweep_cache_entry_survives_a_kill_at_every_step(tmp_path, source):
    from analysis.evaluate.measure import Evaluation
    from analysis.models.load import load_model, load_tokenizer
    from analysis.runs.sweep import sweep
    model = load_model(str(source), device="cpu")
    tokenizer = load_tokenizer(model)

    def scene(root):
        return {"cache": plant_foreign(root / "cache", "entry")}

    def action(root):
        point_cache_seam(root / "cache")
        results = list(sweep(model, tokenizer, ["l1"], [0.5], Evaluation(max_tokens=257, latency=False)))
        return 0 if len(results) == 2 else 1

    def check(root, finished):
        entries = [p for p in (root / "cache").iterdir() if p.suffix == ".json" and not p.name.startswith(".")]
        for entry in entries:  # every entry present is whole (and proves itself: its key and checksum)
            assert "perplexity" in json.loads(entry.read_text())["result"]
        assert len(entries) == 2 if finished else len(entries) <= 2
    kill_every_step("sweep point-cache entry", tmp_path, scene, action, action, check, lambda root: [root / "cache"])


def whole_folder(folder: Path, kind: str) -> bool:
    """A folder of `kind` as the tool finishes it: a final marker of that kind listing exactly its files."""
    record = writes.marker_record(folder)
    files = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()} - {writes.MARKER}
    return record is not None and record.get("state") != "partial" and writes.kind_of(record.get("kind")) == kind \
        and set(record["files"]) == files


@pytest.mark.parametrize("path", ["ctrl-c save", "resume to the end", "discard"])
def test_recovery_state_survives_a_kill_at_every_step(tmp_path, source, path):
    """The recovery state: a Ctrl-C that saves over an older state, a resume that finishes (and discards the
    state), a discard. Killed at each step: the state is whole (old or new) or gone, never half; a re-run
    succeeds and leaves nothing behind."""
    from analysis.io.recovery_state import RECORD, discard_state
    from analysis.models.load import load_model, load_tokenizer
    from analysis.runtime.cancel import Cancelled
    from analysis.shrink.prune import prune
    from analysis.models.key_plan import plan_key_dims
    from analysis.shrink.recovery import RecoverySettings, recover
    model = load_model(str(source), device="cpu")
    tokenizer = load_tokenizer(model)
    pruned = prune(model, "l1", plan_key_dims(model, ratio=0.5)).model
    settings = RecoverySettings(method="qk", steps=3, batch=1, seq_len=16, eval_every=1, eval_tokens=32)

    def stopped_after(n):  # a stop at the first check after n more training steps (checks also run inside forwards)
        steps = []
        return {"progress": lambda event: event["kind"] == "train" and steps.append(1),
                "cancel": lambda: len(steps) >= n}

    def scene(root):
        foreign = plant_foreign(root, "state")
        with pytest.raises(Cancelled):  # a state saved at step 1
            recover(pruned, tokenizer, settings, state_dir=root / "state", **stopped_after(1))
        return {".": foreign}

    def action(root):
        state = root / "state"
        try:
            if path == "ctrl-c save":  # resumed at step 1, stopped after step 2: saved over the old state
                recover(pruned, tokenizer, settings, state_dir=state, resume=True, **stopped_after(1))
            elif path == "resume to the end":
                recover(pruned, tokenizer, settings, state_dir=state, resume=True)
            else:
                discard_state(state)
        except Cancelled:
            pass
        return 0

    def rerun(root):  # the user's next command: the same one (a stop saves the state as it stands)
        if path == "ctrl-c save":
            try:
                recover(pruned, tokenizer, settings, cancel=lambda: True, state_dir=root / "state", resume=True)
            except Cancelled:
                return 0
        return action(root)

    def check(root, finished):
        state = root / "state"
        if path != "ctrl-c save" and (finished or not state.exists()):
            assert not state.exists(), "a finished or discarded state is still there"
            return
        assert whole_folder(state, "recovery state"), f"the state is not whole: {sorted(os.listdir(state))}"
        assert json.loads((state / RECORD).read_text())["step"] in (1, 2)
    kill_every_step(f"recovery state ({path})", tmp_path, scene, action, rerun, check, lambda root: [root])


@pytest.mark.parametrize("mode", ["new", "replace"])
def test_card_out_survives_a_kill_at_every_step(tmp_path, source, monkeypatch, mode):
    """`card MODEL --out DIR`: built as a marked temporary folder and swapped in like a model."""
    from analysis.inspect import model_card
    monkeypatch.setattr(model_card, "read_training", lambda path: {})  # the stubs are inherited by the forks
    monkeypatch.setattr(model_card, "render", lambda card: f"# {card['name']}\n")
    cards = iter(["old", "new"])
    monkeypatch.setattr(model_card, "build_card", lambda model: {"name": next(cards, "new")})

    def scene(root):
        foreign = plant_foreign(root, "card")
        if mode == "replace":
            assert main(["card", str(source), "--out", str(root / "card")]) == 0
        return {".": foreign}

    def action(root):
        return main(["card", str(source), "--out", str(root / "card")])

    def check(root, finished):
        card = root / "card"
        if not card.exists():
            assert not finished and mode == "new", "the card folder is missing"
            return
        assert whole_folder(card, "model card"), f"the card folder is not whole: {sorted(os.listdir(card))}"
        names = {json.loads((card / "card.json").read_text())["name"], (card / "README.md").read_text()}
        assert names in ({"old", "# old\n"}, {"new", "# new\n"}) and (not finished or "new" in names), names
    if mode == "new":
        next(cards)  # every card built is "new"
    kill_every_step(f"card --out ({mode})", tmp_path, scene, action, action, check, lambda root: [root])


def test_zz_report_kill_counts():
    """(Runs last in this file) the number of kills per path, for the record: pytest -s shows it."""
    print("\nkills per save path: " + "; ".join(f"{k}: {v} ({TIMES[k]} s)" for k, v in KILL_COUNTS.items()))
