"""The model card (README.md, YAML front matter + text) every saved prune carries, fit for a model hub.

Written from what the save already knows (config.json and the PruneRun's pruning.json: no measurement here): the
base model, what was pruned (per-layer key dims, strategy, heads), the recurrent state's bytes before and after,
the measured effect with its settings and the role of each text (calibration chooses channels on the train split, an
allocation chooses ratios on the validation split, the numbers reported are on the held-out test split), recovery,
how to load the folder both ways, and the licence of the base model's own card when it states one.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from analysis.archs.base import PRUNED_PREFIX, how_to_load

TOOL = "the state-rank dashboard"


def base_licence(source) -> str | None:
    """`license:` of the base model's README.md front matter (a local folder's), when there is one."""
    try:
        text = (Path(str(source)) / "README.md").read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None
    match = re.match(r"---\n(.*?)\n---", text, re.S)
    if not match:
        return None
    try:
        front = yaml.safe_load(match.group(1))
    except yaml.YAMLError:
        return None
    licence = front.get("license") if isinstance(front, dict) else None
    return str(licence) if licence else None


def _hub_id(source: str) -> str | None:
    """A hub id (org/name) as base_model; a local path is not one."""
    return source if re.fullmatch(r"[\w.-]+/[\w.-]+", source or "") and not Path(source).exists() else None


def _measures(evaluation: dict) -> list[dict]:
    """What the prune measured, one row per metric: before, after (and after recovery), with its settings and the
    role of its text (pruning.json's `measured_*` and `settings`: analysis.shrink.prune_run.PruneRun.metadata)."""
    rows, settings = [], evaluation.get("settings") or {}
    role = f"{settings['role']}: {settings['role_purpose']}" if settings.get("role_purpose") else \
        "held-out: reported, never used to choose"
    before, after = evaluation.get("measured_before") or {}, evaluation.get("measured_after") or {}
    recovered = evaluation.get("measured_recovered") or {}
    if "perplexity" in before and "perplexity" in after:
        b, a = before["perplexity"], after["perplexity"]
        row = {"metric": "perplexity", "dataset": a.get("dataset"), "split": a.get("split"), "role": role,
               **{k: a.get(k) for k in ("context", "stride", "tokens", "device", "dtype")},
               "before": round(b["perplexity"], 4), "after": round(a["perplexity"], 4)}
        if "perplexity" in recovered:
            row["after_recovery"] = round(recovered["perplexity"]["perplexity"], 4)
        rows.append(row)
    if "recall" in before and "recall" in after:
        for b, a in zip(before["recall"]["by_pairs"], after["recall"]["by_pairs"]):
            rows.append({"metric": f"recall accuracy, {a['pairs']} pairs", "role": "fresh recall sequences",
                         "before": round(b["accuracy"], 4), "after": round(a["accuracy"], 4)})
    return rows


def front_matter(config: dict, metadata: dict) -> dict:
    evaluation = metadata.get("evaluation") or {}
    heads = metadata.get("heads")
    source = str(metadata.get("source", ""))
    front = {"library_name": "transformers", "pipeline_tag": "text-generation",
             "tags": ["state-rank-dashboard", "pruned", str(config.get("model_type"))]}
    if _hub_id(source):
        front["base_model"] = source
    licence = base_licence(source)
    if licence:
        front["license"] = licence
    before, after = evaluation.get("measured_before") or {}, evaluation.get("measured_after") or {}
    pruning = {"base_model_path": source or None, "model_type": config.get("model_type"),
               "strategy": metadata.get("strategy"), "strategy_label": metadata.get("label"),
               "ratios": metadata.get("ratios"), "key_dims_before": metadata.get("original_head_k_dims"),
               "key_dims_after": metadata.get("head_k_dims"), "readout": metadata.get("readout"),
               "calibration": evaluation.get("calibration"),
               "state_bytes_per_sequence_before": before.get("state_bytes_per_sequence"),
               "state_bytes_per_sequence_after": after.get("state_bytes_per_sequence"),
               "parameters_before": before.get("parameters"), "parameters_after": after.get("parameters"),
               "measured": _measures(evaluation)}
    if heads:
        pruning["heads"] = {"strategy": heads.get("strategy"), "value_heads_before":
                            [c[1] for c in heads.get("head_counts_before", [])],
                            "value_heads_after": [c[1] for c in heads.get("head_counts", [])],
                            "kept_value_heads": heads.get("kept_value_heads")}
    if evaluation.get("allocation"):
        pruning["allocation"] = "per-layer ratios chosen on the validation split (the test split only reports)"
    if metadata.get("recovery"):
        pruning["recovery"] = metadata["recovery"]
    front["state_rank_pruning"] = {k: v for k, v in pruning.items() if v not in (None, [], {})}
    return front


def _load_lines(config: dict, needs_fla: bool) -> list[str]:
    model_type = str(config.get("model_type"))
    ships = "auto_map" in config
    lines = ["## How to load", ""]
    if ships:
        lines += ["Without the dashboard (torch, transformers" + (" and fla" if needs_fla else "") + " installed): "
                  "the folder carries its own configuration/modeling code (`auto_map` in config.json), which builds "
                  "the family's own model and gives each layer its pruned sizes:", "", "```python",
                  "from transformers import AutoModelForCausalLM",
                  "model = AutoModelForCausalLM.from_pretrained(FOLDER, trust_remote_code=True, use_safetensors=True)", "```", ""]
    else:
        lines += ["The family's own model type holds this prune: `AutoModelForCausalLM.from_pretrained(FOLDER)`"
                  + (" after `import fla`" if needs_fla else "") + " loads it, no code shipped.", ""]
    lines += ["With the dashboard installed (its CPU path, streaming and State lab):", "", "```python",
              "import analysis; analysis.ready()", "from analysis.models.load import load_model",
              "model = load_model(FOLDER)", "```", "", "or `python -m analysis ppl FOLDER` on the command line."]
    if needs_fla:
        lines += ["", "fla's Triton kernels run the linear-attention layers on a GPU; on a CPU an fla model runs only "
                  "through the dashboard's CPU path (as any fla model does)."]
    if ships:
        lines += ["", f"In one sentence: {how_to_load(model_type)}"]
    return lines


def render(config: dict, metadata: dict, needs_fla: bool = False) -> str:
    """README.md of a saved prune: YAML front matter, then the same in words."""
    front = front_matter(config, metadata)
    p = front["state_rank_pruning"]
    lines = ["---", yaml.safe_dump(front, sort_keys=False, allow_unicode=True).rstrip(), "---", "",
             f"# A pruned {str(config.get('model_type')).removeprefix(PRUNED_PREFIX)} model", "",
             f"Query/key channels{' and heads' if 'heads' in p else ''} removed by {TOOL} from "
             f"`{p.get('base_model_path', 'the base model')}`."]
    if "key_dims_after" in p:
        lines += ["", f"- key dims per linear layer: {p.get('key_dims_before')} → {p['key_dims_after']} "
                      f"(strategy {p.get('strategy_label') or p.get('strategy')}, ratios {p.get('ratios')}; "
                      f"{p.get('readout')})"]
    if "heads" in p:
        h = p["heads"]
        lines.append(f"- value heads per linear layer: {h['value_heads_before']} → {h['value_heads_after']} "
                     f"(strategy {h['strategy']})")
    if "state_bytes_per_sequence_after" in p:
        lines.append(f"- recurrent state per sequence: {p['state_bytes_per_sequence_before']:,} → "
                     f"{p['state_bytes_per_sequence_after']:,} bytes")
    if "calibration" in p:
        lines.append(f"- calibration (chooses the channels/heads): {p['calibration']}")
    if "allocation" in p:
        lines.append(f"- allocation: {p['allocation']}")
    for m in p.get("measured", []):
        settings = ", ".join(f"{k} {m[k]}" for k in ("dataset", "context", "stride", "tokens", "device", "dtype")
                             if m.get(k) is not None)
        rec = f", after recovery {m['after_recovery']}" if "after_recovery" in m else ""
        lines.append(f"- {m['metric']} ({m['role']}{'; ' + settings if settings else ''}): "
                     f"{m['before']} → {m['after']}{rec}")
    if "recovery" in p:
        lines.append(f"- recovery: {json.dumps(p['recovery'], sort_keys=True)[:400]}")
    if "license" in front:
        lines.append(f"- licence: {front['license']}, the base model's (from its card)")
    else:
        lines.append("- licence: not stated here; the base model's licence applies")
    return "\n".join(lines + [""] + _load_lines(config, needs_fla)) + "\n"
