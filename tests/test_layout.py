"""Project rules that code review would otherwise have to catch."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_core_never_imports_streamlit():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "analysis").rglob("*.py")
                 if "streamlit" in imported_modules(p)]
    assert offenders == []


def test_top_level_layout():
    for name in ("app.py", "pages", "analysis", "sample_models", "tests", "requirements.txt", "Dockerfile",
                 "Makefile", "benchmarks", "README.md", ".ci/run"):
        assert (ROOT / name).exists(), name
    assert "make test" in (ROOT / "README.md").read_text() and "make test" in (ROOT / ".ci/run").read_text()


def test_requirements_are_exact_pins():
    lines = [l.strip() for l in (ROOT / "requirements.txt").read_text().splitlines()
             if l.strip() and not l.startswith("#")]
    assert lines and all("==" in l for l in lines)
    assert lines[0] == "torch==2.13.0"
