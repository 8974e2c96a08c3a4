"""The package's shape: no import cycles, and no module imports from a layer above its own.

Read from the source (every import, those inside functions too), so a lazy import
cannot hide a dependency that the layering forbids.
"""

from __future__ import annotations

import ast
from pathlib import Path

import deepspeech

PACKAGE = Path(deepspeech.__file__).parent

LAYERS = (
    ("errors", "files", "jsonl", "config", "device", "arguments"),
    ("features", "distributed"),
    ("data",),
    ("lm", "model"),
    ("decoding",),
    ("evaluation",),
    ("training", "execution"),
    ("inference",),
    ("plots", "bench", "doctor"),
    ("cli", "__main__"),
)
"""Lowest first: a module may import from its own layer and the layers before it."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Each module of the package -> the modules of the package it imports."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets.add(base)
                # ``from package import module`` imports that module.
                targets |= {f"{base}.{alias.name}" for alias in node.names}
        # A module's own packages are initialized before it runs: not a dependency.
        ancestors = {".".join(name.split(".")[:end]) for end in range(1, name.count(".") + 1)}
        graph[name] = {target for target in targets if target in modules} - {name, *ancestors}
    return graph


def _layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else "__init__"
    for rank, names in enumerate(LAYERS):
        if top in names:
            return rank
    raise AssertionError(f"{module}: its top-level name {top!r} is in no layer of LAYERS")


def test_no_import_cycles() -> None:
    graph = _imports()
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        for imported in sorted(graph[module]):
            assert imported not in path, f"import cycle: {' -> '.join([*path, imported])}"
            if imported not in done:
                visit(imported, [*path, imported])
        done.add(module)

    for module in sorted(graph):
        visit(module, [module])


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    upward = [f"{module} -> {imported}"
              for module, imports in sorted(_imports().items()) if module != "deepspeech"
              for imported in sorted(imports)
              if imported != "deepspeech" and _layer(imported) > _layer(module)]
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)
