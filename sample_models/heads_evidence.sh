#!/usr/bin/env bash
# Issue 32's evidence (README "Heads: stratification, and fewer heads or smaller keys?"): on the bundled language
# samples, (1) the heads study: the low-/high-rank split on three inputs (Shakespeare test, Wikipedia slice, random
# token ids), its stability, and each head's removal cost on 16 validation windows with paired SEs; (2) plans at
# equal state budgets (75/50/25 % of the state): dk (wanda, l1, drrqr), heads (every head strategy), mixed (wanda
# with every head strategy), Δ log perplexity on 4096 test tokens with paired SEs. Points are cached; a rerun is
# instant. Run niced: a few hours on a 2-core CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
MODELS=${MODELS:-"deltanet-small gated-deltanet-small qwen35-hybrid-small granite-h-small"}
for m in $MODELS; do
  nice "$PY" -m analysis heads "$m" --device cpu --measure 16 --quiet --json "sample_models/results/heads-$m.json"
done
for m in $MODELS; do
  nice "$PY" -m analysis sweep "$m" --device cpu --axis both --strategies wanda --eval-tokens 4096 --quiet \
    --json "sample_models/results/budget-$m.json"
  nice "$PY" -m analysis sweep "$m" --device cpu --axis dk --strategies l1,drrqr --eval-tokens 4096 --quiet \
    --json "sample_models/results/budget-dk-$m.json"
done
