#!/usr/bin/env bash
# Rebuilds the three bundled checkpoints as shipped (2-core CPU, torch path; on a GPU fla's kernels run).
# The two language models train side by side with one thread each (OpenMP threads contending for two
# cores made a two-thread run ~5x slower). Model cards: `python -m analysis card sample_models/<name> --in-place`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1
$PY -m analysis train --arch delta_net --out sample_models/deltanet-small \
    --steps 1200 --warmup 100 --lr 2e-3 --batch 8 --seq-len 256 --eval-every 100 --max-minutes 60 &
$PY -m analysis train --arch gated_deltanet --out sample_models/gated-deltanet-small \
    --steps 900 --warmup 100 --lr 2e-3 --batch 8 --seq-len 256 --eval-every 100 --max-minutes 60 &
wait
$PY -m analysis train --arch delta_net --task recall --out sample_models/deltanet-recall \
    --hidden-size 128 --layers 2 --heads 2 --head-dim 64 --batch 32 --steps 1500 --warmup 100 \
    --lr 3e-3 --recall-pairs 16 --recall-keys 128 --eval-every 250 --max-minutes 20
