"""Project rules that code review would otherwise have to catch."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


# The dashboard's floors: analysis/ (the core) < ui/ (Streamlit-side helpers, in rooms: see below) < pages/ (one
# thin page per view) < app.py. Every import anywhere in a file counts, function-local ones included.
DASHBOARD_FORBIDDEN = {"analysis": {"streamlit", "ui", "pages", "app"}, "ui": {"pages", "app"}, "pages": {"app"}}


def test_the_dashboard_imports_downwards_only():
    offenders = [f"{p.relative_to(ROOT)} imports {name}" for top, forbidden in DASHBOARD_FORBIDDEN.items()
                 for p in sorted((ROOT / top).rglob("*.py")) for name in sorted(imported_modules(p) & forbidden)]
    assert offenders == []


# ui/ has rooms (issue 31): ui/<page>/ for each page of pages/ (what only that page draws), two rooms for features
# that several pages show, and ui/shared/ for what more than one room uses. A room imports ui.shared and itself
# only; ui.shared imports no room (ui.shared < ui.<room> < pages); a page imports ui.shared, its own room and the
# features' rooms. Two rooms that need one thing take it from ui.shared (a model made on one page and read on
# another goes through ui.shared.made).
UI_SHARED = "shared"
UI_FEATURE_ROOMS = {  # rooms beside the pages' own, and why each is one
    "compare": '"Compare with": the loaded model beside a pruned version, on States & rank and on Query noise',
    "heads": "the heads study: head groups on States & rank, the Heads view of Channel importance, the State "
             "lab's partner head",
}


def ui_rooms(root: Path = ROOT) -> set[str]:
    return {p.parent.name for p in (root / "ui").glob("*/*.py")}


def ui_imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, module) for every ui module or package a file imports, function-local imports included; `from ui.x
    import y` names ui.x.y, relative imports are resolved against the file's package."""
    package = list(path.relative_to(root).parent.parts)
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "ui"]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module or ""
            if base.split(".")[0] == "ui":
                found += [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return found


def ui_room_offenders(root: Path = ROOT) -> list[str]:
    """Every import from one ui room into another (ui.shared into any room included), and every page import
    outside ui.shared, the page's own room and the feature rooms."""
    offenders = []
    checked = [(p, p.parent.name, {p.parent.name, UI_SHARED}) for p in sorted((root / "ui").glob("*/*.py"))]
    checked += [(p, p.stem, {p.stem, UI_SHARED, *UI_FEATURE_ROOMS}) for p in sorted((root / "pages").glob("*.py"))]
    for path, room, allowed in checked:
        if room == UI_SHARED:
            allowed = {UI_SHARED}
        for line, module in ui_imports(path, root):
            parts = module.split(".")
            target = parts[1] if len(parts) > 1 else ""
            if target not in allowed:
                offenders.append(f"{path.relative_to(root)}:{line} imports {module} ({room} may import "
                                 f"{', '.join(sorted(allowed))})")
    return offenders


def test_every_ui_module_lives_in_a_room():
    assert sorted(p.name for p in (ROOT / "ui").glob("*.py")) == ["__init__.py"], "a ui module belongs in a room"
    assert [p for p in (ROOT / "ui").glob("*/*/*.py")] == [], "a room is one folder of modules"
    assert all((ROOT / "ui" / room / "__init__.py").exists() for room in ui_rooms())


def test_the_ui_rooms_mirror_the_pages():
    pages = {p.stem for p in (ROOT / "pages").glob("*.py")}
    assert ui_rooms() == pages | set(UI_FEATURE_ROOMS) | {UI_SHARED}, "each page has its room in ui/"


def test_no_ui_room_imports_another():
    assert ui_room_offenders() == []


def test_ui_shared_holds_only_what_two_rooms_use():
    """A ui.shared module that one room alone uses (its page counted with it) belongs in that room. app.py's frame
    counts as a user of its own; a module only other shared modules use is part of them; launch.py is the entry
    point (`python -m ui.shared.launch`)."""
    users: dict[str, set[str]] = {}
    for path in [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py")), *sorted((ROOT / "ui").glob("*/*.py"))]:
        who = "app" if path.name == "app.py" else path.stem if path.parent.name == "pages" else path.parent.name
        for _, module in ui_imports(path):
            parts = module.split(".")
            if len(parts) > 2 and parts[1] == UI_SHARED and who != UI_SHARED:
                users.setdefault(parts[2], set()).add(who)
    lonely = {p.stem: sorted(users[p.stem]) for p in (ROOT / "ui" / UI_SHARED).glob("*.py")
              if len(users.get(p.stem, ())) == 1 and users[p.stem] != {"app"}}
    assert lonely == {}, f"move each into its room: {lonely}"


def test_the_room_rule_catches_a_function_local_import(tmp_path):
    """The checker itself: a function-local import of another room, a room imported by ui.shared, a relative
    import out of a room and a page importing another page's room are all named; imports of ui.shared are not."""
    files = {"ui/__init__.py": "", "ui/shared/__init__.py": "", "ui/shared/jobs.py": "from ui.prune import run\n",
             "ui/prune/__init__.py": "", "ui/prune/run.py": "from ui.shared import jobs\nfrom . import run\n",
             "ui/sweep/__init__.py": "", "ui/sweep/view.py": "def f():\n    import ui.prune.run\n",
             "ui/states/__init__.py": "", "ui/states/view.py": "from ..prune import run\n",
             "pages/sweep.py": "from ui.sweep import view\nfrom ui.prune import run\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = ui_room_offenders(tmp_path)
    assert [f.split(" (")[0] for f in found] == [
        "ui/shared/jobs.py:1 imports ui.prune.run", "ui/states/view.py:1 imports ui.prune.run",
        "ui/sweep/view.py:2 imports ui.prune.run", "pages/sweep.py:2 imports ui.prune.run"], found


# The core's floors, lowest first (issue 31): a package imports only packages on lower floors, never one beside it
# or above it, so the core reads bottom-up and no package needs a function-local import to reach upwards.
#   errors, defaults   the one bad-input exception; torch-free CLI defaults
#   linalg             pure maths on tensors (rank, noise, RRQR, the spectral tracker)
#   runtime            device routing and the CPU ops, Ctrl-C, cancellation, the allocator
#   archs              family adapters, kernel specs, the pruned model types, `ready()`
#   io                 every write and every read of a file someone else may have made
#   data               text, tokenizer and recall inputs
#   models             load, layers, limits and budgets, forwards, streaming, key-dim plans, what a model reads
#   evaluate           perplexity, recall, latency, the harness, before/after measures
#   inspect            states, ranks, noise, head ranks, the State lab, the model card, the every-token trace
#   shrink             strategies, pruning, recovery, sensitivity, allocation, head pruning
#   runs, train        sweeps, the heads study, the offline report; training
#   cli                the parser and its commands
# analysis/__init__.py and __main__.py sit above all of them (the entry points).
CORE_FLOORS = (("errors", "defaults"), ("linalg",), ("runtime",), ("archs",), ("io",), ("data",), ("models",),
               ("evaluate",), ("inspect",), ("shrink",), ("runs", "train"), ("cli",), ("__init__", "__main__"))
FLOOR = {package: level for level, packages in enumerate(CORE_FLOORS) for package in packages}


def core_package(path: Path) -> str:
    """errors/defaults/__init__/__main__ for the top-level modules, else the package folder under analysis/."""
    parts = path.relative_to(ROOT / "analysis").with_suffix("").parts
    return parts[0]


def imported_core_packages(node: ast.AST) -> list[tuple[str, str]]:
    """(package, module as written) for each analysis package an Import/ImportFrom node reaches."""
    if isinstance(node, ast.Import):
        modules = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        modules = [f"{node.module}.{a.name}" for a in node.names] if node.module == "analysis" else [node.module]
    else:
        return []
    return [(m.split(".")[1], m) for m in modules if m.startswith("analysis.")]


def test_every_core_package_has_a_floor():
    found = {core_package(p) for p in (ROOT / "analysis").rglob("*.py")}
    assert found == set(FLOOR), f"place {sorted(found - set(FLOOR))} in CORE_FLOORS, drop {sorted(set(FLOOR) - found)}"


def test_the_architecture_page_states_the_floors():
    """docs/architecture.md (the README's layout section until issue 43) states the floors as the test has them."""
    page = " ".join((ROOT / "docs" / "architecture.md").read_text().split())
    layout = page[page.index("## Layout"):page.index("## How to add")]
    order = " < ".join(", ".join(packages) for packages in CORE_FLOORS[:-1])  # the entry points are not named
    assert order in layout, order


def test_the_core_imports_downwards_only():
    """Issue 31: every import in analysis/ (function-local ones included) goes to a package on a lower floor."""
    offenders = []
    for path in sorted((ROOT / "analysis").rglob("*.py")):
        source = core_package(path)
        for node in ast.walk(ast.parse(path.read_text())):
            for target, module in imported_core_packages(node):
                if target != source and target in FLOOR and FLOOR[target] >= FLOOR[source]:
                    where = "beside" if FLOOR[target] == FLOOR[source] else "above"
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {source} imports {module} "
                                     f"({target} is {where} {source})")
    assert offenders == [], "\n".join(offenders)


def test_top_level_layout():
    for name in ("app.py", "pages", "analysis", "sample_models", "tests", "requirements.txt", "Dockerfile",
                 "Makefile", "benchmarks", "evidence", "README.md", ".ci/run"):
        assert (ROOT / name).exists(), name
    assert "make test" in (ROOT / "README.md").read_text() and "make test" in (ROOT / ".ci/run").read_text()


def test_requirements_are_exact_pins():
    lines = [l.strip() for l in (ROOT / "requirements.txt").read_text().splitlines()
             if l.strip() and not l.startswith("#")]
    assert lines and all("==" in l for l in lines)
    assert lines[0] == "torch==2.13.0"


FAMILY_PARAMETERS = {"q_conv1d", "k_conv1d", "in_proj_qkv", "in_proj_qkvz", "f_a_proj", "f_b_proj", "dt_bias", "A_log"}
FAMILY_MODULES = ("fla.layers", "fla.models", "fla.ops", "transformers.models")


def outside_archs() -> list[Path]:
    files = [ROOT / "app.py", *(ROOT / "ui").rglob("*.py"), *(ROOT / "pages").rglob("*.py")]
    return files + [p for p in (ROOT / "analysis").rglob("*.py") if "archs" not in p.relative_to(ROOT).parts]


def test_family_knowledge_lives_in_the_adapters():
    """Issue 20: no model type, family key, family parameter name or family module import outside analysis/archs/,
    no `model_type ==`, and no strategy singled out by name (a strategy says what it is: `axis_aligned`)."""
    from analysis.archs import FAMILIES, supported_model_types
    from analysis.shrink.strategies import STRATEGIES
    family_words = set(FAMILIES) | set(supported_model_types()) | FAMILY_PARAMETERS
    offenders = []
    for path in outside_archs():
        where = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in family_words:
                offenders.append(f"{where}:{node.lineno} {node.value!r}")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                offenders += [f"{where}:{node.lineno} import {n}" for n in names if n.startswith(FAMILY_MODULES)]
            elif isinstance(node, ast.Compare):
                parts = [node.left, *node.comparators]
                if any(isinstance(p, ast.Attribute) and p.attr == "model_type" for p in parts):
                    offenders.append(f"{where}:{node.lineno} compares model_type")
                offenders += [f"{where}:{node.lineno} compares with strategy {p.value!r}" for p in parts
                              if isinstance(p, ast.Constant) and p.value in STRATEGIES]
    assert offenders == []


def family_names() -> set[str]:
    """How the families are called in words: each adapter's label cut at " (", " / ", " + ", and the label's
    words that are names (with a digit or an inner capital: DeltaNet, Mamba-2, Qwen3.5, RWKV-7)."""
    from analysis.archs import FAMILIES, get_adapter
    names = set()
    for family in FAMILIES:
        for part in re.split(r" \(| / | \+ |\)", get_adapter(family).label):
            names |= {part.strip()} | {w for w in part.split() if re.search(r"\d|[a-z][A-Z]", w)}
    return {n for n in names if n[:1].isupper()} | set(FAMILIES)   # not the generic "attention" of a hybrid


def string_constants(tree: ast.AST):
    """Every string constant of a module except docstrings (f-string parts included)."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docstrings]


# the train command's options that apply to one trainable arch say which (the CLI builds `--arch` without
# importing the families: analysis.archs.TRAINABLE)
WORDING_EXCEPTIONS = {"analysis/cli/commands/train_cmds.py"}


def test_family_names_live_in_the_adapters():
    """Issue 31: no sentence outside analysis/archs/ names a family ("Mamba-2 does not l2-normalise C and B" told
    every model without l2-normalised q/k); say what the model has, from its adapter. Sample model names
    (deltanet-small) are names of files, not of families."""
    samples = {p.name for p in (ROOT / "sample_models").iterdir() if p.is_dir()}
    pattern = re.compile("|".join(rf"(?<![\w-]){re.escape(n)}(?![\w-])" for n in sorted(family_names(), key=len,
                                                                                         reverse=True)), re.I)
    offenders = []
    for path in outside_archs():
        where = str(path.relative_to(ROOT))
        if where in WORDING_EXCEPTIONS:
            continue
        for node in string_constants(ast.parse(path.read_text())):
            text = re.sub("|".join(map(re.escape, samples)), "", node.value)
            if match := pattern.search(text):
                offenders.append(f"{where}:{node.lineno} {match.group()!r} in {node.value[:60]!r}")
    assert offenders == []


# config fields every transformers language model has, and the project's own words that share a name with some
# family's config field (TrainConfig's settings, the pruned types' per-layer key dims, latency's value_dim)
GENERIC_CONFIG_FIELDS = {"vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size", "hidden_act",
                         "max_position_embeddings", "initializer_range", "use_cache", "tie_word_embeddings",
                         "bos_token_id", "eos_token_id", "pad_token_id", "text_config", "value_dim"}


def family_config_fields() -> set[str]:
    """Config fields that belong to some family's config class, not to every language model's."""
    from dataclasses import fields
    from transformers import AutoConfig, PretrainedConfig
    from analysis.archs import FAMILIES, get_adapter
    from analysis.archs.install import ready
    from analysis.train.trainer import TrainConfig
    ready()
    own = {t for family in FAMILIES for t in get_adapter(family).own_types}
    found = set().union(*(AutoConfig.for_model(t).to_dict() for t in own))
    project = {f.name for f in fields(TrainConfig)} | {get_adapter(f).key_dims_config_key for f in FAMILIES}
    return found - set(PretrainedConfig().to_dict()) - GENERIC_CONFIG_FIELDS - project - {"readout_key_dims"}


def test_config_field_names_live_in_the_adapters():
    """Issue 31: no family config field (hidden_ratio, conv_size, num_v_heads, linear_key_head_dim …) is read or
    named outside analysis/archs/: a model's shape comes from its adapter (models/checkpoint.py listed fla's names)."""
    family_fields = family_config_fields()
    offenders = []
    for path in outside_archs():
        where = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text())
        offenders += [f"{where}:{n.lineno} {n.value!r}" for n in string_constants(tree) if n.value in family_fields]
        offenders += [f"{where}:{n.lineno} .{n.attr}" for n in ast.walk(tree)
                      if isinstance(n, ast.Attribute) and n.attr in family_fields and "config" in ast.unparse(n.value)]
    assert offenders == []


def project_modules() -> dict[str, Path]:
    mods = {"app": ROOT / "app.py"}
    for top in ("analysis", "ui", "pages"):
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def import_graph() -> dict[str, set[str]]:
    """module -> project modules it imports anywhere in its body (function-local imports count too)."""
    mods = project_modules()
    graph = {m: set() for m in mods}
    for module, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in mods]
                targets = subs if len(subs) == len(node.names) else [node.module, *subs]
            else:
                continue
            graph[module] |= {t for t in targets if t in mods and t != module}
    return graph


def test_no_import_cycles():
    """Issue 20: the core's layers import downwards only; a cycle held together by a function-local import
    is still a cycle (depth-first search over every import, local ones included)."""
    graph, state, cycles = import_graph(), {}, []

    def visit(module, path):
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                cycles.append(path[path.index(target):] + [target] if target in path else [module, target])
            elif target not in state:
                visit(target, path + [target])
        state[module] = "done"
    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_no_private_names_imported_across_modules():
    """Issue 20: a module's `_private` names are its own; another module that needs one gets a public name."""
    mods = project_modules()
    offenders = []
    for module, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("analysis", "ui"):
                offenders += [f"{module}: from {node.module} import {a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    assert offenders == []


def test_no_test_module_imports_another():
    """Issue 20: importing a test module runs its module-level code and drags in its fixtures (an autouse fixture
    switches on where it was never asked for). Shared helpers live in tests/helpers/, tests/family_cases/
    (the one model factory), browser_utils.py or ui_fixtures.py; fixtures live in conftest.py, which pytest loads
    itself and nobody imports."""
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module] if node.module else [a.name for a in node.names]  # `from . import x`
                names += [f"{node.module}.{a.name}" for a in node.names if node.module]  # `from tests import x`
            else:
                continue
            leaves = {name.split(".")[-1] for name in names}
            if any(leaf.startswith("test_") or leaf == "conftest" for leaf in leaves):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert offenders == []


PAGE_MAX_LINES = 150


def test_pages_stay_thin():
    """Issue 20 item 8: a page reads state, calls the core and draws; drawing logic beyond that lives in ui/."""
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / "pages").glob("*.py"))
            if (n := len(p.read_text().splitlines())) > PAGE_MAX_LINES}
    assert long == {}


def test_the_architecture_page_names_every_core_package():
    """Issue 20: the layout section (docs/architecture.md since issue 43) is the map of analysis/; a package missing
    there is a stale map."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    layout = page[page.index("## Layout"):]
    layout = layout[:layout.index("```", layout.index("```") + 3)]
    packages = sorted(p.parent.name for p in (ROOT / "analysis").glob("*/__init__.py"))
    assert len(packages) >= 10, packages
    assert [p for p in packages if f"  {p}/ " not in layout] == []
    stray = sorted(p.name for p in (ROOT / "analysis").glob("*.py"))
    assert stray == ["__init__.py", "__main__.py", "defaults.py", "errors.py"], "a new core module belongs in a package"


TEST_FOLDERS_BESIDE_THE_CORE = {"ui", "golden", "project"}  # the dashboard, goldens, rules
TEST_SUPPORT = {"helpers", "family_cases", "oracle", "artifacts", "__pycache__"}
UI_TESTS_OF_THE_WHOLE_APP = "app"  # tests/ui/app/: the frame, sidebar, server and jobs; modules that open every page


def test_tests_are_organised_like_the_code():
    """Issue 20 item 9: every test module sits in a folder named after the core package it tests (or ui/, golden/,
    project/), so a change to analysis/<package>/ has its tests in tests/<package>/. Issue 43 item 7: the
    dashboard's tests sit in tests/ui/<room>/ beside ui/<room>/ (a real-browser test too, marked `browser`), or in
    tests/ui/app/ when they test the dashboard as a whole."""
    tests = ROOT / "tests"
    assert sorted(p.name for p in tests.glob("test_*.py")) == []
    core = {p.parent.name for p in (ROOT / "analysis").glob("*/__init__.py")}
    folders = {p.name for p in tests.iterdir() if p.is_dir() and any(p.rglob("*.py"))} - TEST_SUPPORT
    assert folders - core - TEST_FOLDERS_BESIDE_THE_CORE == set()
    assert all(any((tests / f).rglob("test_*.py")) for f in folders)
    ui_tests = tests / "ui"
    assert sorted(p.name for p in ui_tests.glob("test_*.py")) == [], "a dashboard test belongs in its room's folder"
    rooms = {p.name for p in ui_tests.iterdir() if p.is_dir() and any(p.glob("*.py"))} - TEST_SUPPORT
    assert rooms - ui_rooms() - {UI_TESTS_OF_THE_WHOLE_APP} == set(), "tests/ui/<room>/ mirrors ui/<room>/"
    assert all(any((ui_tests / r).glob("test_*.py")) for r in rooms)
    assert [str(p.relative_to(tests)) for p in ui_tests.glob("*/*/*.py")] == [], "a room's tests are one folder"


def test_every_real_browser_test_is_marked_browser():
    """Issue 43 item 7: real-browser tests live in their page's folder, so the `browser` marker, not a folder, is
    what `make test`'s fast lane leaves out: a module that drives chromium (Playwright or browser_utils) carries it."""
    unmarked = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        drives = any(name.split(".")[0] in ("playwright", "browser_utils")
                     for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                     for name in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]))
        marked = any(isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets)
                     and "pytest.mark.browser" in ast.unparse(node.value) for node in tree.body)
        if drives and not marked:
            unmarked.append(str(path.relative_to(ROOT)))
    assert unmarked == []


def test_make_test_runs_the_fast_lane_first_and_every_test_once():
    """Issue 43 item 7: `make test` (what .ci/run calls) runs the fast lane, stopping at its first failure, then the
    rest; the two marker expressions are complements, so each test, whatever its markers, runs in exactly one."""
    from _pytest.mark.expression import Expression
    make = (ROOT / "Makefile").read_text()
    lanes = dict(re.findall(r"^(FAST|REST) := (.+)$", make, re.M))
    recipe = make[make.index("\ntest:"):].split("\n\n")[0]
    runs = re.findall(r'-m pytest -m "\$\((FAST|REST)\)"( -x)?', recipe)
    assert runs == [("FAST", " -x"), ("REST", "")], recipe
    ini = (ROOT / "pytest.ini").read_text()
    markers = re.findall(r"^    (\w+):", ini[ini.index("\nmarkers ="):ini.index("\nfilterwarnings")], re.M)
    assert {"slow", "browser"} <= set(markers)
    fast, rest = Expression.compile(lanes["FAST"]), Expression.compile(lanes["REST"])
    for bits in range(2 ** len(markers)):
        has = {m for i, m in enumerate(markers) if bits >> i & 1}
        assert fast.evaluate(has.__contains__) != rest.evaluate(has.__contains__), has
        assert not fast.evaluate(has.__contains__) or not has & {"slow", "browser"}, has
