#!/usr/bin/env bash
# Rebuilds sample_models/gated-deltanet-deep as shipped: a deep, narrow Gated DeltaNet (12 layers, hidden 64,
# 2 heads of 32 key channels, tied embeddings; 1.4 M parameters, 5.5 MB in float32) trained on the Shakespeare
# train split on a shared 2-core CPU (torch path; on a GPU fla's kernels run), seed 0, one thread.
# It exists so the layer-sensitivity map has enough layers to show differences (issue 40 item 6).
# The step count is fixed so a rerun gives the same weights on this CPU; --max-minutes is only a safety stop.
# Model card afterwards: `python -m analysis card sample_models/gated-deltanet-deep --in-place`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
WORK=${WORK:-runs/gated-deltanet-deep}
OUT=${OUT:-runs/gated-deltanet-deep-final}
export OMP_NUM_THREADS=1
# train refuses to replace a bundled sample, so the model is written to $OUT (beside, not inside, $WORK) and copied
$PY -m analysis train --arch gated_deltanet --out "$OUT" --work "$WORK" \
    --hidden-size 64 --layers 12 --heads 2 --head-dim 32 --seed 0 \
    --steps 400 --warmup 40 --lr 3e-3 --batch 8 --seq-len 256 --eval-every 100 --max-minutes 45 "$@"
test ! -e sample_models/gated-deltanet-deep || { echo "sample_models/gated-deltanet-deep exists: move it away first" >&2; exit 1; }
cp -r "$OUT" sample_models/gated-deltanet-deep
$PY -m analysis card sample_models/gated-deltanet-deep --in-place   # rewrites README.md + card.json (the marker allows it)
rm -f sample_models/gated-deltanet-deep/.state-rank-model.json   # shipped samples carry no write marker
