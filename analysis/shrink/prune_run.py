"""One prune run: what was pruned (plan, strategy, key dims, heads), what it measured (with the settings and the
role of each text), its recovery and where it came from. Both front ends build one (the CLI's `prune`, the Prune
page's Save and Download) and write it through `save`, so a saved prune has one `pruning.json` (`metadata`, schema
in docs/saving.md) and one model card (analysis.io.pruned_card renders `metadata`). `read` / `from_record` open
every pruning.json this project wrote, the two schemas before `schema_version` 2 included; the readers (the
report, the history of plans, `export`'s card) see only the PruneRun. `unchanged` is the one rule for a plan that
would prune nothing: the CLI refuses with it, the page shows it and offers no Prune.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from analysis.data.roles import TextRole, held_out_stretch
from analysis.errors import AnalysisError

SCHEMA_VERSION = 2
PRUNING_FILE = "pruning.json"
MAX_PRUNING_BYTES = 16 << 20
NO_CALIBRATION = "none (data-free)"
PROVENANCE = ("model", "model_type", "device", "dtype")   # the unpruned model, as the CLI's JSON always said
PLAN = ("strategy", "label", "axis_aligned", "ratios", "original_head_k_dims", "head_k_dims", "rescale", "readout",
        "readout_key_dims", "tiles_per_head", "kept_indices", "details", "heads")
SIDES = ("before", "after", "recovered")   # measured_<side> in pruning.json
COLUMNS = {"before": "before", "after": "after pruning", "recovered": "after recovery"}   # the tables' words
OLD_PAGE = {column: side for side, column in COLUMNS.items()}   # the page's saves before schema_version 2


def measurement_settings(evaluation) -> dict:
    """How before/after/recovered were measured (an analysis.shrink.prune_workflow.Evaluation) and the role of
    that text: the test split is held out (it reports, it never chooses; analysis.data.roles)."""
    if evaluation.recall_pairs is not None:
        return {"recall_pairs": list(evaluation.recall_pairs), "recall_sequences": evaluation.recall_sequences,
                "recall_seed": evaluation.recall_seed, "role": "fresh recall sequences"}
    out = {"split": evaluation.split, "start": evaluation.start, "context": evaluation.context,
           "tokens": evaluation.max_tokens}
    if evaluation.split == held_out_stretch().split:  # both front ends report on it; nothing chooses on it
        out.update(role=TextRole.HELD_OUT.value, role_purpose=TextRole.HELD_OUT.purpose)
    return out


@dataclass
class PruneRun:
    source: str                    # the unpruned model's path (or hub id)
    plan: dict                     # PLAN's fields: strategy, key dims before/after, kept channels, heads, readout
    measured: dict                 # {"before" | "after" | "recovered": analysis.evaluate.measure.measure dict}
    calibration: str = NO_CALIBRATION   # the calibration's label (it chooses channels/heads on the train split)
    settings: dict | None = None   # measurement_settings (None: read from a file saved before they were kept)
    recovery: dict | None = None   # RecoveryResult.metadata() of the recovery that ran
    saved_model: str = "pruned"    # which model the folder holds: "pruned" or "recovered"
    provenance: dict = field(default_factory=dict)
    allocation: dict | None = None  # `prune --allocate`'s report (ratios chosen on the validation split)
    model: object = None           # the model `save` writes; None for a run read back from a file

    @classmethod
    def of(cls, result, unpruned, source: str, ratios, before: dict, after: dict, evaluation,
           calibration: str | None = None) -> PruneRun:
        """A prune of `unpruned` just made (prune_and_measure's PruneResult and measurements, its Evaluation)."""
        from analysis.models.key_plan import tiles
        from analysis.models.load import describe
        from analysis.shrink.prune import readout_label
        info, facts = result.info, describe(unpruned)
        plan = {"strategy": result.strategy, "label": info["label"], "axis_aligned": info["axis_aligned"],
                "ratios": ratios, "original_head_k_dims": result.original_dims, "head_k_dims": result.dims,
                "rescale": info["rescale"], "readout": readout_label(result.model, info["rescale"]),
                "readout_key_dims": info["readout_key_dims"], "tiles_per_head": tiles(result.dims),
                "kept_indices": [s.indices.tolist() if s.indices is not None else None for s in result.selections],
                "details": info["details"], **({"heads": info["heads"]} if "heads" in info else {})}
        return cls(str(source), plan, {"before": before, "after": after}, calibration or NO_CALIBRATION,
                   measurement_settings(evaluation), model=result.model, provenance={  # as the CLI always had it
                       "model": unpruned.analysis_name, "model_type": facts.model_type, "device": facts.device,
                       "dtype": facts.dtype})

    def recovered(self, model, measured: dict, recovery: dict) -> PruneRun:
        """This run holding the recovered model (saved instead of the pruned one), its measurement and recovery."""
        return replace(self, measured={**self.measured, "recovered": measured}, recovery=recovery,
                       saved_model="recovered", model=model)

    def metadata(self) -> dict:
        """pruning.json (schema_version 2; docs/saving.md): the plan at the top, the measurements under
        "evaluation" as the CLI's JSON has always carried them."""
        ev = {**self.provenance, "source": self.source, "strategy": self.plan.get("strategy"),
              **{k: self.plan.get(k) for k in ("head_k_dims", "tiles_per_head", "rescale", "readout")},
              "calibration": self.calibration, "settings": self.settings,
              **{f"measured_{side}": self.measured[side] for side in SIDES if side in self.measured}}
        if "heads" in self.plan:
            ev["heads"] = self.plan["heads"]
        ev.update({f"perplexity_{side}": self.measured[side]["perplexity"] for side in SIDES  # long-standing keys
                   if "perplexity" in (self.measured.get(side) or {})})
        for name in ("allocation", "recovery"):
            if getattr(self, name):
                ev[name] = getattr(self, name)
        out = {"schema_version": SCHEMA_VERSION, "source": self.source, **self.plan, "calibration": self.calibration,
               "saved_model": self.saved_model, "evaluation": ev}
        if self.recovery:
            out["recovery"] = self.recovery
        return out

    def columns(self) -> list[tuple[str, dict]]:
        """(the tables' column, measure() dict) for each measurement, in order."""
        return [(COLUMNS[side], self.measured[side]) for side in SIDES if isinstance(self.measured.get(side), dict)]

    def save(self, out, tokenizer=None, *, overwrite: bool = False,
             exists_hint: str = "choose a new directory or allow overwriting") -> Path:
        """The model (pruned or recovered), pruning.json and the model card into a new folder, atomically; a recall
        model's task goes with it, so the saved model stays one."""
        from analysis.io.export import carry_recall_task
        from analysis.io.model_dir import save_model
        return save_model(self.model, out, tokenizer=tokenizer, metadata=self.metadata(), overwrite=overwrite,
                          exists_hint=exists_hint, extra=lambda folder: carry_recall_task(self.source, folder))

    def zip(self, name: str, tokenizer=None) -> bytes:
        """The same folder, zipped (the page's Download)."""
        from analysis.io.export import model_zip
        return model_zip(self.model, name, tokenizer, self.metadata(), source=self.source)


def from_record(record: dict) -> PruneRun:
    """A pruning.json as a PruneRun: schema_version 2, the CLI's saves before it (`measured_*`, and before those
    `perplexity_*` only) and the Prune page's (columns "before", "after pruning", "after recovery")."""
    ev = record.get("evaluation") if isinstance(record.get("evaluation"), dict) else {}
    measured = {side: ev.get(f"measured_{side}") or ({"perplexity": ev[f"perplexity_{side}"]}
                                                      if isinstance(ev.get(f"perplexity_{side}"), dict) else None)
                for side in SIDES}
    measured.update({OLD_PAGE[c]: m for c, m in ev.items() if c in OLD_PAGE})
    measured = {side: m for side, m in measured.items() if isinstance(m, dict)}
    saved = record.get("saved_model") or ("recovered" if "recovered" in measured else "pruned")
    return PruneRun(str(record.get("source", "")), {k: record[k] for k in PLAN if k in record}, measured,
                    record.get("calibration") or ev.get("calibration") or NO_CALIBRATION, ev.get("settings"),
                    record.get("recovery") or ev.get("recovery"), saved,
                    {k: ev[k] for k in PROVENANCE if k in ev}, ev.get("allocation"))


def read(folder) -> PruneRun:
    """The PruneRun saved in a pruned model's folder; one sentence when pruning.json is missing, too big, not JSON,
    from a newer version of this tool, or no prune."""
    from analysis.io.reads import loads, read_bytes
    from analysis.io.writes import show
    path = Path(folder).expanduser() / PRUNING_FILE
    hint = "give a directory saved by `python -m analysis prune` or the dashboard's Prune page"
    if not path.is_file():
        raise AnalysisError(f"{show(folder)} has no {PRUNING_FILE}, so it is not a pruned model this tool saved; "
                            f"{hint}.")
    try:
        record = loads(read_bytes(path, MAX_PRUNING_BYTES, PRUNING_FILE, hint).decode("utf-8"), PRUNING_FILE, hint)
    except (OSError, ValueError) as exc:
        raise AnalysisError(f"{show(path)} cannot be read as JSON ({type(exc).__name__}); {hint}.") from None
    if not isinstance(record, dict) or not isinstance(record.get("head_k_dims"), list):
        raise AnalysisError(f"{show(path)} does not describe a pruning (no head_k_dims); {hint}.")
    version = record.get("schema_version", 1)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise AnalysisError(f"{show(path)} has schema_version {version!r}, newer than this tool's "
                            f"{SCHEMA_VERSION}; update the dashboard to read it.")
    return from_record(record)


def unchanged(model, dims: list[int], ratio=None, ratios=None, round_to=None, head_counts=None) -> str | None:
    """The one rule for a plan that would prune nothing, as one sentence: every key channel kept although a ratio
    asked to prune (e.g. 0.2 of 32 channels rounded up to a multiple of 32), or every head kept. `prune` and `plan`
    refuse with it; the Prune page shows it and offers no Prune. None for any other plan (ratio 0 asks nothing)."""
    from analysis.models.key_plan import key_dims
    from analysis.shrink.heads.prune import value_heads
    if dims == key_dims(model) and any(r and r > 0 for r in ([ratio] if ratios is None else ratios)):
        why, fix = (f"after rounding to a multiple of {round_to}", "a smaller rounding (16 or 32) or none") \
            if round_to else ("at these ratios", "a larger ratio")
        return (f"This plan keeps every key channel {why} (key dims {dims}), so the pruned model would equal the "
                f"original; use {fix}.")
    if head_counts is not None and list(head_counts) == value_heads(model):
        return (f"This head plan keeps every head (counts {list(head_counts)}), so the pruned model would equal the "
                "original; use a larger ratio or smaller counts.")
    return None
