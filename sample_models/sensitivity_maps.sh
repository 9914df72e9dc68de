#!/usr/bin/env bash
# The shipped layer-sensitivity maps (sample_models/results/sensitivity-*.json): each layer pruned alone at
# each ratio, measured on the validation split (recall: synthetic sequences of seed 4321), default map
# settings (so the Prune page finds them), three strategies per model (l1 only for the hybrid Qwen3.5 sample and
# the 12-layer deep sample: a map costs ~10 minutes there). Points are cached; a rerun is instant.
# tests/models/test_shipped_maps.py checks that every bundled sample has its l1 map and docs/deep-sample.md lists them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
for strategy in l1 wanda drrqr; do
  for model in deltanet-recall deltanet-small gated-deltanet-small granite-h-small; do
    nice "$PY" -m analysis sensitivity "$model" --strategy "$strategy" --ratios 0.25,0.5,0.75,0.875 --device cpu \
      --json "sample_models/results/sensitivity-$model-$strategy.json"
  done
done
for model in qwen35-hybrid-small gated-deltanet-deep; do
  nice "$PY" -m analysis sensitivity "$model" --strategy l1 --ratios 0.25,0.5,0.75,0.875 --device cpu \
    --json "sample_models/results/sensitivity-$model-l1.json"
done
