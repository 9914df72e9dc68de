#!/usr/bin/env bash
# Rebuilds sample_models/granite-h-small as shipped: a Mamba-2 hybrid in IBM Granite 4.0-H-Micro's layout
# (transformers' granitemoehybrid, dense MLP, no position embedding, tied embeddings): 8 layers, every 4th one
# softmax attention (6 Mamba-2 mixers), hidden 256, 8 Mamba-2 heads of 32 channels, state size N = 64 in 2
# groups (each group's B and C serve 4 heads), MLP 320; 6.06 M parameters, 24.3 MB in float32.
# Trained on the Shakespeare train split on a shared 2-core CPU (the project's chunked SSD op on CPU).
# --max-minutes is a safety stop (the run is resumable with --resume).
# Model card afterwards: `python -m analysis card sample_models/granite-h-small --in-place`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
WORK=${WORK:-runs/granite-h-small}
STEPS=${STEPS:-1000}
export OMP_NUM_THREADS=1
# train refuses to replace a bundled sample, so the model is written to $WORK/final and copied
$PY -m analysis train --arch mamba2 --model-type granitemoehybrid --out "$WORK/final" --work "$WORK" \
    --hidden-size 256 --layers 8 --heads 8 --key-heads 2 --head-dim 32 --state-size 64 --intermediate-size 320 \
    --full-attention-interval 4 --warmup 100 --lr 2e-3 --batch 8 --seq-len 256 --eval-every 100 \
    --steps "$STEPS" --max-minutes 85 "$@"
test ! -e sample_models/granite-h-small || { echo "sample_models/granite-h-small exists: move it away first" >&2; exit 1; }
cp -r "$WORK/final" sample_models/granite-h-small
$PY -m analysis card sample_models/granite-h-small --in-place   # rewrites README.md + card.json (the marker allows it)
rm -f sample_models/granite-h-small/.state-rank-model.json   # shipped samples carry no write marker
