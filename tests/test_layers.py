"""The layers of tcc import only downward, without cycles, in modules and functions of readable size.

tcc is one import package spread over four directories (pyproject's
``package-dir``: compiler/ is ``tcc``, ir/ is ``tcc.ir``, passes/ is
``tcc.passes``, backends/ is ``tcc.backends``), layered

    ir (0)  <-  passes (1)  <-  backends (2)  <-  compiler (3)

(docs/architecture.md).  Python enforces none of this, and a function-local
import hides a cycle from anyone reading the top of a file, so this test
reads every module's imports itself, module-level and function-level alike
(a small AST walk; nothing is imported), and fails listing

- every import from a lower layer to a higher one (top-level ``tcc.*``
  modules such as ``tcc.api`` are the compiler layer);
- every import cycle between modules (strongly connected components);
- every module over 700 lines and every function over 80 lines.

``test_the_checker_finds_*`` run the same checker on a small synthetic tree
with one violation of each kind, so the real-tree tests cannot pass because
the checker saw nothing.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"tcc.ir": 0, "tcc.passes": 1, "tcc.backends": 2}  # everything else in tcc is the compiler layer, 3
LAYER_NAMES = ["ir", "passes", "backends", "compiler"]
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80


def package_dirs(pyproject: Path) -> dict[str, str]:
    """pyproject's ``package-dir`` table (package -> directory), read without a TOML dependency."""
    match = re.search(r"^package-dir\s*=\s*\{([^}]*)\}", pyproject.read_text(encoding="utf-8"), re.M)
    assert match, f"no package-dir table in {pyproject}"
    return dict(re.findall(r'"([^"]+)"\s*=\s*"([^"]+)"', match.group(1)))


def layer(module: str) -> int:
    for prefix, rank in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            return rank
    return 3


def module_files(root: Path, packages: dict[str, str]) -> dict[str, Path]:
    """Module name -> file, for every .py file under the package directories."""
    out: dict[str, Path] = {}
    for package, directory in packages.items():
        base = root / directory
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for filename in sorted(filenames):
                if not filename.endswith(".py"):
                    continue
                path = Path(dirpath) / filename
                parts = list(path.relative_to(base).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                out[".".join([package, *parts])] = path
    return out


@dataclass
class Report:
    """What the checker found; each entry is one line of the failure message."""

    upward: list[str] = field(default_factory=list)
    cycles: list[str] = field(default_factory=list)
    long_modules: list[str] = field(default_factory=list)
    long_functions: list[str] = field(default_factory=list)
    graph: nx.DiGraph = field(default_factory=nx.DiGraph)  # module -> the tcc modules it imports


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: dict[str, Path]) -> list[str]:
    """The tcc modules an import statement names (``from tcc.ir import loops`` is tcc.ir.loops)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: from the module's package, one level up per extra dot
            package = module.split(".") if is_package else module.split(".")[:-1]
            package = package[: len(package) - node.level + 1]
            base = ".".join(package + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    out = []
    for name in names:
        while name and name not in known:  # tcc.ir.loops.For -> tcc.ir.loops
            name = name.rpartition(".")[0]
        if name and name != module and name.split(".")[0] == "tcc":
            out.append(name)
    return out


def check(root: Path, packages: dict[str, str]) -> Report:
    files = module_files(root, packages)
    graph = nx.DiGraph()
    where: dict[tuple[str, str], dict[str, None]] = {}  # edge -> "file:line" of its imports, in order
    report = Report()
    for module, path in files.items():
        rel = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=rel)
        graph.add_node(module)
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            report.long_modules.append(f"{rel}: {lines} lines (module {module})")
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _imported(node, module, path.name == "__init__.py", files):
                    graph.add_edge(module, target)
                    where.setdefault((module, target), {})[f"{rel}:{node.lineno}"] = None
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    report.long_functions.append(f"{rel}:{node.lineno} {node.name}: {length} lines")
    def at(edge: tuple[str, str]) -> str:
        return ", ".join(sorted(where[edge], key=lambda loc: (loc.rpartition(":")[0], int(loc.rpartition(":")[2]))))

    for a, b in sorted(graph.edges):
        if layer(b) > layer(a):
            report.upward.append(
                f"{at((a, b))}: {a} ({LAYER_NAMES[layer(a)]}) imports {b} ({LAYER_NAMES[layer(b)]})"
            )
    for component in sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1):
        edges = [f"{a} -> {b} ({at((a, b))})" for a, b in sorted(graph.subgraph(component).edges)]
        report.cycles.append(f"{' <-> '.join(component)}: " + "; ".join(edges))
    report.long_modules.sort()
    report.long_functions.sort()
    report.graph = graph
    return report


@pytest.fixture(scope="module")
def report() -> Report:
    return check(ROOT, package_dirs(ROOT / "pyproject.toml"))


def _fail(what: str, found: list[str]) -> None:
    if found:
        pytest.fail(f"{len(found)} {what}:\n  " + "\n  ".join(found), pytrace=False)


def test_package_dirs_are_read_from_pyproject():
    assert package_dirs(ROOT / "pyproject.toml") == {
        "tcc": "compiler", "tcc.ir": "ir", "tcc.passes": "passes", "tcc.backends": "backends",
    }


def test_no_import_goes_up_a_layer(report):
    _fail("imports from a lower layer to a higher one (ir=0 < passes=1 < backends=2 < compiler=3)", report.upward)


def test_no_import_cycle(report):
    _fail("import cycles between modules (function-level imports included)", report.cycles)


def test_no_module_over_700_lines(report):
    _fail(f"modules over {MAX_MODULE_LINES} lines", report.long_modules)


def test_no_function_over_80_lines(report):
    _fail(f"functions over {MAX_FUNCTION_LINES} lines", report.long_functions)


#: The rooms of the compiler layer (tcc = compiler/) and what each may not import directly:
#: the command line and the framework integrations sit on top (nothing imports them); the
#: runtime runs what the build made without knowing the oracle; the extern kernels are NumPy
#: and BLAS code that the runtime and the reference share, below both.
ROOM_RULES = {
    "tcc.runtime": ("tcc.cli", "tcc.integrations", "tcc.reference", "tcc.api"),
    "tcc.runtime.externs": ("tcc.cli", "tcc.integrations", "tcc.reference", "tcc.api", "tcc.build",
                            "tcc.runtime.compiled", "tcc.runtime.call_orders"),
    "tcc.reference": ("tcc.cli", "tcc.integrations", "tcc.runtime.compiled"),
    "tcc.build": ("tcc.cli", "tcc.integrations"),
    "tcc.integrations": ("tcc.cli",),
}
#: The oracle shares nothing with what it checks, not even indirectly: neither the passes, nor
#: the code generator, nor the compiled-call machinery.  (It does reach the native counting
#: sort, tcc.backends.counting_sort, through the index-input checks a compiled call shares: a
#: stable order is unique, so sharing it cannot hide a kernel's bug; tests/test_indirect_index.py
#: checks the sort against NumPy's stable argsort.)
INTERPRETER_NEVER_REACHES = ("tcc.runtime.compiled", "tcc.build", "tcc.backends.cpu", "tcc.backends.lower_llvm",
                             "tcc.backends.llvm.lower", "tcc.backends.llvm.exprs", "tcc.backends.llvm.kernels",
                             "tcc.passes", "tcc.cli", "tcc.integrations")


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_rooms_import_only_what_their_rule_allows(report):
    found = []
    for a, b in sorted(report.graph.edges):
        rooms = [room for room in ROOM_RULES if _within(a, room)]
        if not rooms:
            continue
        room = max(rooms, key=len)  # the innermost room's rule
        if any(_within(b, banned) for banned in ROOM_RULES[room]):
            found.append(f"{a} ({room}) imports {b}")
    _fail("imports between the compiler's rooms that their rules forbid (ROOM_RULES)", found)


def test_the_reference_interpreter_reaches_no_compiler_machinery(report):
    reached = nx.descendants(report.graph, "tcc.reference.interpreter")
    _fail("modules the interpreter reaches that it must not (INTERPRETER_NEVER_REACHES)",
          sorted(m for m in reached if any(_within(m, p) for p in INTERPRETER_NEVER_REACHES)))


def test_the_compiler_package_holds_few_modules_directly():
    """Fifteen modules at most directly in compiler/: the rest lives in rooms by concern."""
    direct = sorted(p.name for p in (ROOT / "compiler").glob("*.py"))
    assert len(direct) <= 15, direct


# ---------------------------------------------------------------------------
# the checker itself, on a synthetic tree
# ---------------------------------------------------------------------------

SYNTHETIC = {
    "ir/__init__.py": "",
    "ir/a.py": "from tcc.passes import b\n",                          # upward, module level
    "ir/ok.py": "import tcc.ir.a\nfrom . import a\n",                 # sideways: fine
    "passes/__init__.py": "",
    "passes/b.py": "def f():\n    from tcc.passes import c\n",        # function level: b -> c
    "passes/c.py": "from .b import f\n",                              # relative: c -> b, the cycle
    "passes/d.py": "def g():\n    import tcc.api\n",                  # upward, function level
    "backends/__init__.py": "",
    "backends/e.py": "from tcc.ir import ok\nfrom ..passes import c\n",  # downward: fine
    "compiler/__init__.py": "",
    "compiler/api.py": "from tcc.backends.e import x\n",
    "compiler/long.py": "def long():\n" + "    x = 1\n" * 80 + "\n\ndef short():\n" + "    x = 1\n" * 79,
    "compiler/big.py": "x = 1\n" * 701,
}
SYNTHETIC_DIRS = {"tcc": "compiler", "tcc.ir": "ir", "tcc.passes": "passes", "tcc.backends": "backends"}


@pytest.fixture
def synthetic(tmp_path) -> Report:
    for name, text in SYNTHETIC.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return check(tmp_path, SYNTHETIC_DIRS)


def test_the_checker_finds_upward_imports(synthetic):
    assert synthetic.upward == [
        "ir/a.py:1: tcc.ir.a (ir) imports tcc.passes.b (passes)",
        "passes/d.py:2: tcc.passes.d (passes) imports tcc.api (compiler)",
    ]


def test_the_checker_finds_cycles_through_function_level_and_relative_imports(synthetic):
    assert synthetic.cycles == [
        "tcc.passes.b <-> tcc.passes.c: tcc.passes.b -> tcc.passes.c (passes/b.py:2); "
        "tcc.passes.c -> tcc.passes.b (passes/c.py:1)"
    ]


def test_the_checker_finds_long_modules_and_functions(synthetic):
    assert synthetic.long_modules == ["compiler/big.py: 701 lines (module tcc.big)"]
    assert synthetic.long_functions == ["compiler/long.py:1 long: 81 lines"]


def test_every_subpackage_is_packaged():
    """setup.py discovers the packages under each directory of pyproject's package-dir: every
    directory with an ``__init__.py`` is in a wheel, and nothing is listed by hand."""
    spec = importlib.util.spec_from_file_location("tcc_setup", ROOT / "setup.py")
    setup_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup_py)  # not __main__: setup() does not run
    assert setup_py.ROOTS == package_dirs(ROOT / "pyproject.toml")
    here = os.getcwd()
    try:
        os.chdir(ROOT)  # find_packages takes the directories relative to the project root
        listed = set(setup_py.packages())
    finally:
        os.chdir(here)
    found = set()
    for package, directory in package_dirs(ROOT / "pyproject.toml").items():
        for init in (ROOT / directory).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / directory).parts
            found.add(".".join((package, *rel)))
    assert {"tcc.cli", "tcc.runtime.externs", "tcc.passes.autodiff"} <= found
    assert found == listed, f"packages: missing {sorted(found - listed)}, extra {sorted(listed - found)}"
