"""The package as a whole: any module imports first, in a fresh interpreter; the import
graph has no circle and no arrow from a lower layer to a higher one; the pure core imports
no I/O library."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "bisect"
PACKAGE = ROOT / "llm_bisect"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "ground",
        (
            "llm_bisect",
            "errors",
            "files",
            "clock",
            "redact",
            "retry",
            "lease",
            "guard",
            "logs",
            "index_page",
            "sparse",
            "startup",
            "enginecache",
            "pins",
            "templates",
            "secretnames",
            "yamlfile",
            "jsonvalue",
            "environment",
            "weights",
            "outdir",
            "report",
            "escape",
            "data",
            "data.*",
        ),
    ),
    (
        "values: the pure core and the seams (the Protocols and values the kinds name)",
        (
            "model",
            "fingerprint",
            "posterior",
            "priors",
            "loads",
            "search",
            "symptom",
            "cost",
            "verdict",
            "localize",
            "delta",
            "checks",
            "checks.metrics",
            "checks.stats",
            "checks.compare",
            "checks.gsm8k",
            "checks.budget",
            "checks.reply",
            "checks.dataset",
            "sources",
            "sources.picks",
            "launchers",
            "builds",
            "builds.cache",
            "launchers.devices",
            "launchers.spread",
        ),
    ),
    ("kinds and the config's models", ("kinds", "config")),
    (
        "the kinds' modules and the adapters they use",
        (
            "launchers.*",
            "builds.*",
            "checks.*",
            "sources.*",
            "client",
            "collectenv",
            "registry",
            "ledger",
            "sim",
            "sim.*",
        ),
    ),
    ("plugins", ("plugins",)),
    (
        "runner, probe, journal, reports",
        ("runner", "probe", "journal", "report.*", "places", "terminal"),
    ),
    ("services", ("services", "services.*", "demo", "starter")),
    ("cli", ("cli",)),
]
"""From the ground up (docs/architecture.md): a module may import its own layer's and
lower layers' modules only. An exact name wins over a `prefix.*`."""


def modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: its dotted name → (file, is a package)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def layer_of(module: str) -> int:
    name = module.removeprefix("llm_bisect.") if module != "llm_bisect" else module
    best: tuple[int, int] | None = None  # (how specific, layer)
    for i, (_, members) in enumerate(LAYERS):
        for member in members:
            if member == name:
                return i
            wider = member.endswith(".*") and name.startswith(member[:-1])
            if wider and (best is None or len(member) > best[0]):
                best = (len(member), i)
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[1]


def imports(known: dict[str, tuple[Path, bool]], typing: bool = False) -> dict[str, set[str]]:
    """module → the package's modules it imports, at module level or in a function;
    imports under `if TYPE_CHECKING:` aside (they never run), unless `typing`."""
    graph: dict[str, set[str]] = {}
    for module, (path, package) in known.items():
        tree = ast.parse(path.read_text())
        typing_only = {
            id(n)
            for block in ast.walk(tree)
            if not typing
            and isinstance(block, ast.If)
            and "TYPE_CHECKING" in ast.unparse(block.test)
            for n in ast.walk(block)
        }
        here = module.split(".") if package else module.split(".")[:-1]
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            names: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[: len(here) - node.level + 1]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                names = [f"{stem}.{alias.name}" for alias in node.names] + [stem]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                if not name.startswith("llm_bisect"):
                    continue
                while name not in known and "." in name:
                    name = name.rsplit(".", 1)[0]
                if name in known and name != module:
                    targets.add(name)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_circle_and_nothing_points_up() -> None:
    """No circle, type-only imports counted (a seam the kinds name sits below them); no
    import that runs points up a layer."""
    known = modules()
    graph = imports(known)
    # a package imports its own modules (`from .cache import ...`), which import it back
    # only as their parent: those arrows are not circles
    for module in graph:
        graph[module] = {t for t in graph[module] if not module.startswith(t + ".")}
    typed = imports(known, typing=True)
    for module in typed:
        typed[module] = {t for t in typed[module] if not module.startswith(t + ".")}
    assert cycles(typed) == []
    upward = [
        f"{m} ({LAYERS[layer_of(m)][0]}) -> {t} ({LAYERS[layer_of(t)][0]})"
        for m, targets in sorted(graph.items())
        for t in sorted(targets)
        if layer_of(t) > layer_of(m)
    ]
    assert upward == []


def test_the_graph_sees_a_function_level_import_and_a_circle(tmp_path: Path) -> None:
    """The checks above can fail: an import inside a function is an arrow (one under
    TYPE_CHECKING is not), and two modules importing each other are a circle."""
    (tmp_path / "a.py").write_text("def f() -> None:\n    from .b import x\n")
    (tmp_path / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n"
    )
    known = {"llm_bisect.a": (tmp_path / "a.py", False), "llm_bisect.b": (tmp_path / "b.py", False)}
    graph = imports(known)
    assert graph == {"llm_bisect.a": {"llm_bisect.b"}, "llm_bisect.b": set()}
    typed = imports(known, typing=True)  # counted for circles: a and b are one
    assert cycles(typed) == [["llm_bisect.a", "llm_bisect.b"]]
    assert cycles({**graph, "llm_bisect.b": {"llm_bisect.a"}}) == [["llm_bisect.a", "llm_bisect.b"]]
    assert (
        layer_of("llm_bisect.cli") > layer_of("llm_bisect.plugins") > layer_of("llm_bisect.kinds")
    )
    assert layer_of("llm_bisect.launchers.process") > layer_of("llm_bisect.config")


FIRST = textwrap.dedent(
    """
    import importlib, json, os, sys, traceback
    # the libraries the package imports, loaded once before the forks (the package's own
    # modules never are): each child then costs its own modules only
    for library in os.environ.get("LIBRARIES", "").split():
        try:
            importlib.import_module(library)
        except BaseException:
            pass
    failed = {}
    for name in sys.argv[1:]:
        pid = os.fork()
        if pid == 0:  # a child that has imported nothing of the package: the module is first
            try:
                importlib.import_module(name)
            except BaseException:
                sys.stderr.write(traceback.format_exc().splitlines()[-1] + "\\n")
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        if status:
            failed[name] = status
    print(json.dumps(failed))
    """
)


def test_every_module_imports_first() -> None:
    """Each module imported first, in an interpreter that has imported nothing of the
    package (a fork of one that has not): none crashes half-loaded."""
    # data/'s scripts run in other interpreters (vLLM's workers, a base image), never here;
    # sim/__main__ is `python -m llm_bisect.sim`, which serves
    names = [
        m
        for m in modules()
        if not m.startswith("llm_bisect.data.") and m != "llm_bisect.sim.__main__"
    ]
    libraries = sorted(
        {
            name.split(".")[0]
            for path in (ROOT / "llm_bisect").rglob("*.py")
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0)
            for name in (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            )
            if name and not name.startswith("llm_bisect")
        }
    )
    done = subprocess.run(
        [sys.executable, "-c", FIRST, *names],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "LIBRARIES": " ".join(libraries)},
        check=True,
    )
    assert json.loads(done.stdout) == {}, done.stderr
    assert len(names) >= 100


def in_a_fresh_python(*args: str) -> str:
    """What `python -c ARGS` prints with only this checkout's bisect/ on the path."""
    done = subprocess.run(
        [sys.executable, "-c", *args],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    return done.stdout


def test_the_simulated_server_starts_without_pydantic() -> None:
    """It starts at every probe of every simulated run (the demo, most tests): pydantic and
    the config's models were 0.2 s of CPU at each start, half of it."""
    code = (
        "import sys, llm_bisect.sim.server; "
        "print(sorted({'pydantic', 'llm_bisect.model', 'llm_bisect.launchers'} & set(sys.modules)))"
    )
    assert in_a_fresh_python(code).strip() == "[]"


@pytest.mark.parametrize("module", ["llm_bisect.search", "llm_bisect.report.documents"])
def test_the_pure_core_loads_no_io_library(module: str) -> None:
    code = (
        f"import sys, {module}; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'httpx', 'docker', 'git'}))"
    )
    assert in_a_fresh_python(code).strip() == "[]"


SIDE_EFFECTS = textwrap.dedent(
    """
    import importlib, json, sys
    from llm_bisect import kinds
    importlib.import_module(sys.argv[1])
    print(json.dumps({"kinds": {r.seam: r.tags() for r in kinds.registries() if r.tags()},
                      "listeners": len(kinds._listeners)}))
    """
)


@pytest.mark.parametrize(
    ("module", "registered"),
    [
        ("llm_bisect.config", {}),
        ("llm_bisect.builds", {}),
        ("llm_bisect.builds.image", {"build type": ["image"]}),
        ("llm_bisect.launchers.docker", {"launcher": ["docker"]}),
    ],
)
def test_importing_a_module_registers_at_most_its_own_kind(
    module: str, registered: dict[str, list[str]]
) -> None:
    """Importing a kind's module registers that kind only (the `image` strategy is its own
    module's, not docker's); importing config adds no listener (plugins.load does)."""
    assert json.loads(in_a_fresh_python(SIDE_EFFECTS, module)) == {
        "kinds": registered,
        "listeners": 0,
    }


def test_plugins_load_makes_the_config_follow_the_registries() -> None:
    code = (
        "from llm_bisect import config, kinds, plugins; plugins.load(); plugins.load(); "
        "print(kinds._listeners == [config.rebuild])"
    )
    assert in_a_fresh_python(code).strip() == "True"


HELP = textwrap.dedent(
    """
    import contextlib, io, runpy, sys
    failed = []
    for path in sys.argv[1:]:
        sys.argv, out = [path, "--help"], io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                runpy.run_path(path, run_name="__main__")
        except SystemExit as done:
            if done.code in (0, None) and "usage:" in out.getvalue():
                continue
        except Exception as error:
            out.write(repr(error))
        failed.append(f"{path}: {out.getvalue()[-300:]}")
    print("\\n".join(failed))
    """
)


def test_every_script_with_options_prints_its_help() -> None:
    """`python scripts/X.py --help` prints usage and exits 0, as a user's first try does (the
    noise bench's once raised a TypeError: a `%` in its help text)."""
    scripts = ROOT.parent / "scripts"
    paths = sorted(str(p) for p in scripts.glob("*.py") if "argparse" in p.read_text())
    assert len(paths) >= 15, paths
    assert in_a_fresh_python(HELP, *paths).strip() == ""


UNTYPED = re.compile(r"dict\[str, (Any|object)\]")
"""A document of no declared shape (issue 50's grep)."""
UNTYPED_ALIAS = re.compile(
    r"^\s*(?:type\s+)?(\w+)\s*(?::\s*TypeAlias\s*)?=\s*"
    r"[\"']?dict\[str, (?:Any|object)\][\"']?\s*(?:#.*)?$"
)
"""A name given to one (`Doc = dict[str, Any]`, `Doc: TypeAlias = ...`, `type Doc = ...`)."""
UNTYPED_MAX = 60
"""At most this many lines say dict[str, Any] or dict[str, object], or use an alias of them:
the rest are typed shapes (TypedDicts, dataclasses, `Json`)."""


def untyped_lines(folder: Path) -> list[str]:
    """Every line under `folder` that names an untyped document, or an alias of one."""
    lines = [
        (path, line)
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
    ]
    aliases = {m.group(1) for _, line in lines if (m := UNTYPED_ALIAS.match(line))}
    used = re.compile(r"\b(?:" + "|".join(sorted(aliases)) + r")\b") if aliases else None
    return [
        f"{path.relative_to(folder)}: {line.strip()}"
        for path, line in lines
        if UNTYPED.search(line) or (used is not None and used.search(line))
    ]


def test_untyped_documents_are_few() -> None:
    found = untyped_lines(PACKAGE)
    assert len(found) <= UNTYPED_MAX, "\n".join(found)


def test_an_alias_of_an_untyped_document_counts_with_its_uses(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "from typing import Any, TypeAlias\n"
        "Doc: TypeAlias = dict[str, Any]\n"
        "def f(d: Doc) -> Doc:\n"
        "    return d\n"
        "def g(d: dict[str, object]) -> None: ...\n"
        "def h(d: dict[str, int]) -> None: ...\n"
    )
    assert [line.split(": ", 1)[1] for line in untyped_lines(tmp_path)] == [
        "Doc: TypeAlias = dict[str, Any]",
        "def f(d: Doc) -> Doc:",
        "def g(d: dict[str, object]) -> None: ...",
    ]


WIDE = 8
"""Parameters past which a signature takes a context instead (a frozen dataclass that names
the concept: runner.Record, kinds.LauncherContext, ...). `self` and `cls` are not counted."""
WIDE_ALLOWED = {
    # typer reads a command's options from its signature: one parameter a flag
    "cli.gate_cmd",
    "cli.deps_cmd",
    "cli.init_cmd",
    # the search's two entry points: each parameter an input of the algorithm (issues 46 and
    # 47 rework them); plan_batch is called from the runner, the benches and ~30 tests
    "search.posterior_batch",
    "search.plan_batch",
}
"""The functions allowed more than WIDE parameters: at most 5."""


def wide_functions(root: Path) -> dict[str, int]:
    """Every function under `root` (nested and methods too, by dotted name: module.Class.f)
    with more than WIDE parameters: positional and keyword-only, `self`/`cls` aside."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")

        def walk(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    a = child.args
                    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
                    count = sum(1 for name in names if name not in ("self", "cls"))
                    if count > WIDE:
                        found[prefix + child.name] = count
                    walk(child, f"{prefix}{child.name}.")
                elif isinstance(child, ast.ClassDef):
                    walk(child, f"{prefix}{child.name}.")
                else:
                    walk(child, prefix)

        walk(ast.parse(path.read_text()), f"{module}.")
    return found


def test_at_most_five_functions_take_more_than_eight_parameters() -> None:
    """Wide signatures are grouped into contexts; the few left are named, with why."""
    assert len(WIDE_ALLOWED) <= 5
    wide = wide_functions(PACKAGE)
    assert sorted(set(wide) - WIDE_ALLOWED) == [], wide


def test_the_count_sees_a_method_keyword_only_parameters_and_no_self(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        textwrap.dedent(
            """
            class A:
                def wide(self, a, b, c, d, e, f, g, *, h, i): ...
                def narrow(self, a, b, c, d, e, f, g, h): ...
            def outer(a, b, c, d, e, f, g, h, /, i=0):
                def inner(a, b, c, d, e, f, g, h, i, j): ...
            """
        )
    )
    assert wide_functions(tmp_path) == {"m.A.wide": 9, "m.outer": 9, "m.outer.inner": 10}
