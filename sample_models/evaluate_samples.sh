#!/usr/bin/env bash
# Measures the bundled checkpoints: model cards, the pruning sweeps of the README table.
# Results land in sample_models/results/ (JSON) and each model folder (README.md + card.json).
# Pruned models keep the original readout scale (pure channel removal; --rescale default for the reference's).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
MODELS=${MODELS:-"deltanet-small gated-deltanet-small deltanet-recall granite-h-small"}
for m in $MODELS; do
  $PY -m analysis card "$m" --in-place
done
for m in $MODELS; do
  [ "$m" = deltanet-recall ] && continue
  $PY -m analysis sweep "$m" --strategies random,l1,wanda,grad,pca,drrqr --ratios 0.25,0.5,0.75 \
      --eval-tokens 16384 --json "sample_models/results/sweep-$m.json"
done
if [[ " $MODELS " == *" gated-deltanet-small "* ]]; then  # the README's recovery example
  out=$(mktemp -d)/gdn-75
  $PY -m analysis prune gated-deltanet-small --strategy drrqr --ratio 0.75 --recover-steps 150 --eval-tokens 16384 \
      --out "$out" --json sample_models/results/recover-gated-deltanet-small-drrqr-0.75.json
fi
