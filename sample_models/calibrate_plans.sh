#!/usr/bin/env bash
# Predicted vs measured loss of random per-layer plans on the bundled samples: the calibration of the plan
# prediction's uncertainty (analysis/shrink/predict.py). Writes sample_models/results/plan-calibration.json and
# plan-calibration.md (the README's table). Plans already measured against the same map are not measured again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
nice "$PY" benchmarks/plan_calibration.py --plans 24 "$@"
