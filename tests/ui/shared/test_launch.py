"""`python -m ui.shared.launch`: the dashboard server, with torch, transformers and fla imported before it serves."""
import subprocess
import sys
from pathlib import Path

from ui.shared import launch

ROOT = Path(__file__).resolve().parents[3]


def test_the_core_is_imported_before_the_server_starts():
    probe = ("import sys; from ui.shared import launch; assert 'fla' not in sys.modules; print(launch.import_core()); "
             "import analysis.archs.install as r; "
             "print(all(m in sys.modules for m in ('torch', 'transformers', 'fla', 'plotly.graph_objects')), r._ready)")
    run = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    said, imported = run.stdout.strip().splitlines()
    assert run.returncode == 0 and said.startswith("Imported torch, transformers and fla in ") and imported == "True True", \
        run.stdout + run.stderr


def test_a_failed_import_is_one_sentence_and_the_server_still_starts(monkeypatch, capsys):
    import analysis
    from streamlit.web import cli

    def broken():
        raise ImportError("No module named 'fla.ops'")
    started = []
    monkeypatch.setattr(analysis, "ready", broken)
    monkeypatch.setattr(cli, "main", lambda: started.append(list(sys.argv)) or 0)
    monkeypatch.setattr(sys, "argv", ["launch"])
    assert launch.main(["--server.port", "8765"]) == 0
    assert started == [["streamlit", "run", str(ROOT / "app.py"), "--server.port", "8765"]]
    said = capsys.readouterr().err.splitlines()[-1]
    assert said == ("Importing the analysis core failed (ImportError: No module named 'fla.ops'); "
                    "the dashboard will show why."), said
