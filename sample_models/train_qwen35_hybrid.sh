#!/usr/bin/env bash
# Rebuilds sample_models/qwen35-hybrid-small as shipped: transformers' Qwen3.5 text architecture (8 blocks,
# Gated DeltaNet : full attention = 3 : 1, hidden 256, 2 key heads and 4 value heads of 64 channels), trained
# on the Shakespeare train split on a shared 2-core CPU (torch path; on a GPU fla's kernels run).
# Model card afterwards: `python -m analysis card sample_models/qwen35-hybrid-small`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1
$PY -m analysis train --arch qwen3_5 --out sample_models/qwen35-hybrid-small ${WORK:+--work "$WORK"} \
    --hidden-size 256 --layers 8 --heads 4 --key-heads 2 --head-dim 64 --intermediate-size 320 \
    --full-attention-interval 4 --steps 700 --warmup 100 --lr 2e-3 --batch 8 --seq-len 256 \
    --eval-every 100 --max-minutes 76
