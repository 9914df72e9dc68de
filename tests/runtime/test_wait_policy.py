"""Importing the package makes OpenMP threads sleep when idle (no spinning on a shared host), unless the user chose."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = "import analysis, os, torch; print(os.environ['OMP_WAIT_POLICY'])"


def policy(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if env_value is not None:
        env["OMP_WAIT_POLICY"] = env_value
    done = subprocess.run([sys.executable, "-c", CODE], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_passive_by_default_and_the_users_choice_kept():
    assert policy(None) == "PASSIVE"
    assert policy("ACTIVE") == "ACTIVE"
