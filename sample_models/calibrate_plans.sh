#!/usr/bin/env bash
# Predicted vs held-out loss of random, uniform, allocator and noise-chasing plans on the bundled samples: the calibration of the plan
# prediction's uncertainty on held-out text (analysis/shrink/predict.py). Writes sample_models/results/plan-calibration-held-out.json and
# plan-calibration-held-out.md (docs/held-out.md's table). Plans already measured against the same map are not measured again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
nice "$PY" evidence/plan_calibration.py --random 12 "$@"
