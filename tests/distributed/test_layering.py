"""deepspeech.distributed imports at the top of its modules, never inside a function, so
that its import order (its ``__init__`` lists it) is what a reader sees. The package-wide
rules (no cycles, no upward imports) are tests/test_architecture.py's."""

from __future__ import annotations

import ast
from pathlib import Path

import deepspeech.distributed

PACKAGE = Path(deepspeech.distributed.__file__).parent


def test_no_imports_inside_functions() -> None:
    nested = []
    for path in sorted(PACKAGE.glob("*.py")):
        tree = ast.parse(path.read_text())
        top_level = {id(node) for node in tree.body}
        nested += [f"{path.name}:{node.lineno}: {ast.unparse(node)}" for node in ast.walk(tree)
                   if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in top_level]
    assert not nested, f"imports inside functions (move them to the top): {nested}"
