"""deepspeech.distributed imports in one direction: no cycles, no imports hidden in functions."""

from __future__ import annotations

import ast
from pathlib import Path

import deepspeech.distributed

PACKAGE = Path(deepspeech.distributed.__file__).parent


def _imports() -> tuple[dict[str, set[str]], list[str]]:
    """Each module's imports of sibling modules, and the imports made inside functions."""
    modules = {path.stem for path in PACKAGE.glob("*.py")}
    graph: dict[str, set[str]] = {}
    nested: list[str] = []
    for path in sorted(PACKAGE.glob("*.py")):
        tree = ast.parse(path.read_text())
        top_level = {id(node) for node in tree.body}
        siblings: set[str] = set()
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            if id(node) not in top_level:
                nested.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module] if node.module else [a.name for a in node.names]
                siblings |= {name.split(".")[0] for name in names}
        graph[path.stem] = (siblings & modules) - {path.stem}
    return graph, nested


def test_no_import_cycles() -> None:
    graph, _ = _imports()
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        for imported in sorted(graph[module]):
            assert imported not in path, f"import cycle: {' -> '.join([*path, imported])}"
            if imported not in done:
                visit(imported, [*path, imported])
        done.add(module)

    for module in sorted(graph):
        visit(module, [module])


def test_no_imports_inside_functions() -> None:
    _, nested = _imports()
    assert not nested, f"imports inside functions (move them to the top): {nested}"
