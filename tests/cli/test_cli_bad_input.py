"""Every bad input a careless or hostile user tried (issue 11, items 3, 4, 8, 9): one sentence, exit code 2.

The CLI runs in-process (`analysis.cli.main.main`), on tiny random-init checkpoints saved in tmp dirs and
broken on purpose. The memory available is fixed at 16 GB (so one request may use 8 GB) to make the
memory refusals the same on every machine.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest
import torch

from analysis.data import inputs
from analysis.models import limits
from analysis.cli.main import main
from ui_fixtures import save_tiny_recall

AVAILABLE = 16 * 10**9


@pytest.fixture(autouse=True)
def fixed_memory(monkeypatch):
    monkeypatch.setattr(limits, "available_memory", lambda device="cpu": AVAILABLE)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory, tiny_dirs):
    """name -> path of every fixture a probe names: good and broken models, odd text files."""
    from safetensors.torch import load_file, save_file
    root = tmp_path_factory.mktemp("bad-inputs")
    good = tiny_dirs["delta_net"]
    out = {"good": good}

    def variant(name, config=None, **files):
        path = root / name
        shutil.copytree(good, path)
        if config is not None:
            (path / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
        for file, content in files.items():
            (path / file.replace("_", ".")).write_bytes(content)
        out[name] = path
        return path

    cfg = json.loads((good / "config.json").read_text())
    variant("config-list", "[]")
    variant("type-list", {**cfg, "model_type": ["delta_net"]})
    variant("layers-negative", {**cfg, "num_hidden_layers": -1})
    variant("layers-huge", {**cfg, "num_hidden_layers": 100_000})
    variant("conv-mismatch", {**cfg, "conv_size": 2})
    variant("header-list", model_safetensors=struct.pack("<Q", 2) + b"[]")
    variant("bad-tokenizer", tokenizer_json=b"{ this is not a tokenizer")
    loop = variant("symlink-loop")
    (loop / "model.safetensors").unlink()
    os.symlink("model.safetensors", loop / "model.safetensors")
    weights_dir = variant("weights-is-dir")
    (weights_dir / "model.safetensors").unlink()
    (weights_dir / "model.safetensors").mkdir()
    config_dir = variant("config-is-dir")
    (config_dir / "config.json").unlink()
    (config_dir / "config.json").mkdir()
    tensors = load_file(good / "model.safetensors")
    save_file({k: v for k, v in tensors.items() if ".layers.1." not in k}, variant("layer-missing") / "model.safetensors")
    save_file({**tensors, "model.layers.7.attn.q_proj.weight": torch.zeros(2, 2)},
              variant("tensor-unexpected") / "model.safetensors")
    out["recall"] = save_tiny_recall(root / "recall")
    out["empty"] = root / "empty.txt"
    out["empty"].write_text("  \n")
    out["binary"] = root / "binary.bin"
    out["binary"].write_bytes(bytes(range(256)) * 64)
    out["latin1"] = root / "latin1.txt"
    out["latin1"].write_bytes("Café crème brûlée à la carte, naïve façade. ".encode("latin-1") * 200)
    out["long"] = root / ("x" * 5000)
    return out


PROBES = [
    # item 3: wrong results with exit 0, configs too big for the machine
    ("missing tensors", ["rank", "{layer-missing}"], r"do not match its config\.json: \d+ tensors missing \(model\.layers\.1\."),
    ("unexpected tensor", ["rank", "{tensor-unexpected}"], r"1 unexpected \(model\.layers\.7\.attn\.q_proj\.weight\)"),
    ("size mismatch", ["rank", "{conv-mismatch}"], r"conv1d\.weight \[64, 1, 4\] instead of \[64, 1, 2\]"),
    ("num_hidden_layers 1e5", ["rank", "{layers-huge}"], r"[\d,]+ parameters in float32\) needs about [\d.]+ GB of memory"),
    # item 9: files that are not what they claim
    ("config []", ["rank", "{config-list}"], r"holds a JSON list, not an object"),
    ("model_type list", ["rank", "{type-list}"], r"Architecture \['delta_net'\] .* is not supported"),
    ("num_hidden_layers -1", ["rank", "{layers-negative}"], r"num_hidden_layers .* whole number ≥ 1, not -1"),
    ("safetensors header []", ["rank", "{header-list}"], r"corrupt or truncated \(the header is a JSON list"),
    ("weights symlink loop", ["rank", "{symlink-loop}"], r"cannot be read \(Too many levels of symbolic links\)"),
    ("weights unreadable (a folder)", ["rank", "{weights-is-dir}"], r"cannot be read \(Is a directory\)"),
    ("config unreadable (a folder)", ["rank", "{config-is-dir}"], r"config\.json cannot be read as JSON \(Is a directory\)"),
    ("bad tokenizer.json", ["rank", "{bad-tokenizer}", "--tokens", "16", "--batch", "1"],
     r"tokenizer\.json cannot be loaded as a tokenizer"),
    ("5,000-character path", ["rank", "{long}"], r"cannot be used \(File name too long\)"),
    ("emoji hub id", ["rank", "\U0001F917/model"], r"neither an existing directory nor a valid hub id"),
    # item 9: text files
    ("text is a folder", ["rank", "{good}", "--text", "{good}"], r"is a directory, not a text file"),
    ("binary text", ["rank", "{good}", "--text", "{binary}"], r"binary file \(it contains NUL bytes\)"),
    ("not UTF-8", ["rank", "{good}", "--text", "{latin1}"], r"is not UTF-8 text"),
    ("empty text", ["rank", "{good}", "--text", "{empty}"], r"is empty"),
    # item 4: sizes bounded by memory before work starts
    ("train split 8192 × 64", ["rank", "{good}", "--split", "train", "--tokens", "8192", "--batch", "64"],
     r"logits alone 17\.2 GB\) needs about [\d.]+ GB of memory, more than the 8\.0 GB one request may use"),
    ("noise --samples 1e8", ["noise", "{good}", "--samples", "1e8"], r"100,000,000 samples .* needs about"),
    ("latency --tokens 1e7", ["latency", "{good}", "--tokens", "1e7"], r"10000000 tokens .* needs about"),
    ("ppl --context 1e6", ["ppl", "{good}", "--context", "1000000"], r"Scoring perplexity .* needs about"),
    # item 9: flags
    ("--snr abc", ["noise", "{good}", "--snr", "abc"], r"argument --snr: each value must be a finite number"),
    ("--snr empty", ["noise", "{good}", "--snr", ""], r"argument --snr: needs at least one value"),
    ("--keys -3", ["noise", "{good}", "--keys", "-3"], r"argument --keys: must be a whole number ≥ 1, got -3"),
    ("--samples 0", ["noise", "{good}", "--samples", "0"], r"argument --samples: must be a whole number ≥ 1"),
    ("--key-dims abc", ["latency", "{good}", "--key-dims", "abc"], r"argument --key-dims: each value must be a whole"),
    ("--key-dims empty", ["latency", "{good}", "--key-dims", ""], r"argument --key-dims: needs at least one value"),
    ("--key-dims 300", ["latency", "{good}", "--key-dims", "16,300"], r"between 1 and 256, got 300"),
    ("latency --tokens 0", ["latency", "{good}", "--tokens", "0"], r"argument --tokens: must be a whole number ≥ 1"),
    ("latency --threads -1", ["latency", "{good}", "--threads", "-1"], r"argument --threads: must be a whole number"),
    ("latency --batch 0", ["latency", "{good}", "--batch", "0"], r"argument --batch: must be a whole number ≥ 1"),
    ("sweep --ratios abc", ["sweep", "{good}", "--ratios", "abc"], r"argument --ratios: each value must be a finite"),
    ("sweep --ratios 1.5", ["sweep", "{good}", "--ratios", "0.5,1.5"], r"at least 0 and below 1, got 1\.5"),
    ("--max-tokens -100", ["ppl", "{good}", "--max-tokens", "-100"], r"argument --max-tokens: must be a whole number"),
    ("ppl --context 0", ["ppl", "{good}", "--context", "0"], r"argument --context"),
    ("--ratio with --ratios", ["prune", "{good}", "--strategy", "l1", "--ratio", "0.5", "--ratios", "0.5,0.5",
                               "--out", "{tmp}/pruned"], r"either --ratio .* or --ratios .*, not both"),
    ("prune without a ratio", ["prune", "{good}", "--strategy", "l1", "--out", "{tmp}/pruned"], r"Give --ratio"),
    ("importance --ratio 1", ["importance", "{good}", "--ratio", "1"], r"argument --ratio: must be at least 0 and below 1"),
    ("rank --tokens 0", ["rank", "{good}", "--tokens", "0"], r"argument --tokens"),
    ("rank --tokens abc", ["rank", "{good}", "--tokens", "abc"], r"argument --tokens: must be a whole number, got 'abc'"),
    ("unknown flag", ["rank", "{good}", "--snr", "10"], r"unrecognized arguments: --snr 10"),
    ("card without training.json", ["card", "{good}"], r"has no training\.json"),
    ("train --steps -1", ["train", "--out", "{tmp}/t", "--steps", "-1"], r"argument --steps: must be a whole number ≥ 1"),
    ("train --layers 0", ["train", "--out", "{tmp}/t", "--layers", "0"], r"argument --layers"),
    ("train --lr abc", ["train", "--out", "{tmp}/t", "--lr", "abc"], r"argument --lr: must be a finite number"),
    ("train --head-dim 1000", ["train", "--out", "{tmp}/t", "--head-dim", "1000"], r"between 1 and 256"),
    ("train pairs > keys", ["train", "--out", "{tmp}/t", "--task", "recall", "--recall-pairs", "200"],
     r"--recall-pairs \(200\) cannot exceed --recall-keys \(128\)"),
    ("train too big", ["train", "--out", "{tmp}/t", "--hidden-size", "100000"], r"Training [\d,]+ parameters .* needs"),
    # item 9: a recall model where text is needed
    ("ppl on a recall model", ["ppl", "{recall}"], r"associative-recall model .* --split recall` for its recall accuracy"),
    # a recall model is pruned and measured on recall accuracy (as on the Prune page); recovery reads text
    ("prune --recover-steps on a recall model", ["prune", "{recall}", "--strategy", "l1", "--ratio", "0.5",
                                                 "--recover-steps", "2", "--out", "{tmp}/p"],
     r"associative-recall model without a tokenizer, and recovery trains on text; drop --recover-steps"),
    ("sweep on a recall model", ["sweep", "{recall}"], r"`sweep` \(which reads text\) cannot run on it"),
    ("rank on a recall model with --text", ["rank", "{recall}", "--text", "{latin1}"],
     r"associative-recall model without a tokenizer: it reads its own recall sequences, not text"),
    ("ppl on deltanet-recall", ["ppl", "deltanet-recall"], r"`python -m analysis ppl deltanet-recall --split recall`"),
]


def run(argv, capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def expand(args, dirs, tmp_path):
    names = {**{k: str(v) for k, v in dirs.items()}, "tmp": str(tmp_path)}
    return [a.format(**names) if "{" in a else a for a in args]


@pytest.mark.parametrize("probe, args, message", PROBES, ids=[p[0] for p in PROBES])
def test_bad_input_is_one_sentence_and_exit_2(probe, args, message, dirs, tmp_path, capsys):
    import re
    code, _, err = run(expand(args, dirs, tmp_path), capsys)
    assert code == 2, err
    assert "Traceback" not in err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert re.search(message, err), err
    assert len(err) < 600, err  # a 5,000-character input is shortened in the message
    assert not (tmp_path / "pruned").exists() and not (tmp_path / "t").exists()


def test_size_mismatch_message_points_at_nothing_unseen(dirs, tmp_path, capsys):
    """transformers' own message said 'look at the above report', which the CLI never showed."""
    code, _, err = run(["rank", dirs["conv-mismatch"]], capsys)
    assert code == 2 and "above" not in err and "q_conv1d.weight" in err


def test_unreadable_model_directory_is_one_sentence(dirs, monkeypatch, capsys):
    """As root chmod 000 changes nothing, so the listing of the folder itself fails here."""
    import pathlib
    bad = Path(dirs["good"])
    original = pathlib.Path.glob

    def glob(self, pattern):
        if Path(self) == bad:
            raise PermissionError(13, "Permission denied", str(self))
        return original(self, pattern)
    monkeypatch.setattr(pathlib.Path, "glob", glob)
    code, _, err = run(["rank", bad], capsys)
    assert code == 2 and err.startswith("error: ") and "Permission denied" in err and "Traceback" not in err


def test_unreadable_text_file_is_one_sentence(dirs, monkeypatch, capsys):
    def refuse(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(inputs, "open", refuse, raising=False)
    code, _, err = run(["rank", dirs["good"], "--text", dirs["latin1"], "--tokens", "16"], capsys)
    assert code == 2 and "cannot be read (Permission denied)" in err and len(err.strip().splitlines()) == 1


def test_a_few_bad_bytes_are_a_warning_not_an_error(dirs, tmp_path, capsys):
    text = tmp_path / "mostly.txt"
    text.write_bytes(("To be, or not to be, that is the question. " * 40).encode() + b"\xff\xfe tail words here\n")
    code, out, err = run(["rank", dirs["good"], "--text", text, "--tokens", "16", "--batch", "1", "--device", "cpu"],
                         capsys)
    assert code == 0, err
    assert err.startswith("warning: ") and "not UTF-8" in err and "U+FFFD" in err


def test_importance_ratio_1_is_refused_before_loading(dirs, monkeypatch, capsys):
    """Validate every argument first: no model load, no calibration (it took 23 s before the ratio check)."""
    import analysis.models.load
    monkeypatch.setattr(analysis.models.load, "load_model", lambda *a, **k: pytest.fail("loaded before validating"))
    code, _, err = run(["importance", dirs["good"], "--ratio", "1"], capsys)
    assert code == 2 and "--ratio" in err


def test_help_still_exits_0(capsys):
    assert main(["--help"]) == 0 and "usage" in capsys.readouterr().out
