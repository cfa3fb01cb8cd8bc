"""The import graph inside lectures/ has no cycle, and no lecture script imports another.

Read from the source with ``ast`` (every import statement, at module level or inside a
function, and ``importlib.import_module("lectures....")`` calls), not from ``sys.modules``, so
an import that only runs on some path counts too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LECTURE = re.compile(r"lectures\.\d\d_\w+")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that the file at ``path`` imports (a package's own name when it
    imports from the package's ``__init__``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            names = [node.args[0].value]
        found |= {n for n in names if n in known}
    return found


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in (ROOT / "lectures").rglob("*.py")}
    return {name: imported(path, set(files)) - {name} for name, path in files.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected part of ``edges`` that has one (depth-first)."""
    found, done = [], set()

    def visit(node, stack):
        if node in stack:
            found.append(stack[stack.index(node):] + [node])
            return
        if node in done:
            return
        for nxt in sorted(edges.get(node, ())):
            visit(nxt, stack + [node])
        done.add(node)

    for node in sorted(edges):
        visit(node, [])
    return found


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_lectures_have_no_import_cycle():
    # A package imported from its own submodule (lectures.llm.x -> lectures.llm) is the
    # package's __init__ re-exporting that submodule, not a cycle of ideas: left out.
    edges = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in graph().items()}
    assert cycles(edges) == []


def test_no_lecture_imports_another_lecture():
    edges = graph()
    assert {m: sorted(t for t in ts if LECTURE.fullmatch(t))
            for m, ts in edges.items() if LECTURE.fullmatch(m)
            and any(LECTURE.fullmatch(t) for t in ts)} == {}


def test_tinylm_does_not_import_the_real_model_harness():
    # The small training model reads the course text from lectures.corpus, not through
    # lectures.llm (which loads the pretrained checkpoint).
    edges = graph()
    assert {m: sorted(t for t in ts if t == "lectures.llm" or t.startswith("lectures.llm."))
            for m, ts in edges.items() if m.startswith("lectures.tinylm")
            and any(t == "lectures.llm" or t.startswith("lectures.llm.") for t in ts)} == {}
