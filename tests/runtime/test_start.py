"""Fast start: the CLI's help and `models` never import torch, fla or transformers (issue 14, item 3)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import runpy, sys
sys.argv = ["analysis", *{argv!r}]
try:
    runpy.run_module("analysis", run_name="__main__")
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in ("torch", "fla", "transformers", "triton") if m in sys.modules)
print(__import__("json").dumps({{"heavy": heavy, "code": code}}), file=sys.stderr)
"""


def _run(argv):
    out = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    return out.stdout, json.loads(out.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [["--help"], ["models"], ["models", "--json", "-"], ["rank", "--help"],
                                  ["prune", "--help"], ["sweep", "--help"], ["sensitivity", "--help"]])
def test_help_and_models_import_no_torch(argv):
    stdout, probe = _run(argv)
    assert probe == {"heavy": [], "code": 0}, probe
    if argv == ["models", "--json", "-"]:
        assert "deltanet-small" in {s["name"] for s in json.loads(stdout)["samples"]}
    elif argv == ["models"]:
        assert "deltanet-small" in stdout
    else:
        assert "usage:" in stdout


def test_import_analysis_is_cheap_and_ready_installs():
    """`import analysis` alone patches nothing; analysis.ready() installs the CPU path (once)."""
    code = ("import sys, analysis; assert 'torch' not in sys.modules; analysis.ready(); analysis.ready(); "
            "from analysis.runtime import backend; assert backend._installed; "
            "import fla.layers.delta_net as dn; assert hasattr(dn.chunk_delta_rule, '__wrapped__')")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=300)
