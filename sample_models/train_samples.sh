#!/usr/bin/env bash
# Rebuilds the three bundled checkpoints exactly as shipped (2-core CPU, torch path; a GPU uses fla's kernels).
# Model cards are then written by `python -m analysis card sample_models/<name>`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
$PY -m analysis train --arch delta_net --out sample_models/deltanet-small \
    --steps 1300 --warmup 100 --lr 2e-3 --batch 8 --seq-len 256 --eval-every 100 --max-minutes 40
$PY -m analysis train --arch gated_deltanet --out sample_models/gated-deltanet-small \
    --steps 1000 --warmup 100 --lr 2e-3 --batch 8 --seq-len 256 --eval-every 100 --max-minutes 35
$PY -m analysis train --arch delta_net --task recall --out sample_models/deltanet-recall \
    --hidden-size 128 --layers 2 --heads 2 --head-dim 64 --batch 32 --steps 1500 --warmup 100 \
    --lr 3e-3 --recall-pairs 16 --recall-keys 128 --eval-every 250 --max-minutes 20
