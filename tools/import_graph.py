"""The import graph of a package: its modules, the imports between them, and its depth.

    python tools/import_graph.py api              # files, import edges, longest import chain
    python tools/import_graph.py api --edges      # ... and every edge
    python tools/import_graph.py api --packages   # the same with each subpackage as one node

Read from the source (ast), never imported, so it works on any checkout. An edge A -> B means
module A imports module B (both inside the package); `depth` counts the modules on the
longest chain of imports with no cycle. tests/api/test_api_layout.py uses it to keep the API
dialect packages from importing one another.
"""

from __future__ import annotations

import argparse
import ast
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_name(path: Path, root: Path = ROOT) -> str:
    """`api/chat/plan.py` -> `api.chat.plan`; a package's __init__ is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(package: str, root: Path = ROOT) -> dict[str, Path]:
    """Every module of `package` (a dotted name under `root`), by name."""
    return {module_name(path, root): path for path in sorted((root / package.replace(".", "/")).rglob("*.py"))}


def imported_names(path: Path, module: str, modules: set[str]) -> set[str]:
    """The modules among `modules` that `module` (at `path`) imports, relative imports
    resolved. `from package import submodule` names the submodule, not the package."""
    names: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            submodules = {f"{base}.{alias.name}" for alias in node.names} & modules
            names.update(submodules if len(submodules) == len(node.names) else {base, *submodules})
    return names & modules


def import_edges(package: str, root: Path = ROOT) -> set[tuple[str, str]]:
    """(importer, imported) for every import between two modules of `package`."""
    modules = package_modules(package, root)
    edges = set()
    for name, path in modules.items():
        for imported in imported_names(path, name, set(modules)):
            if imported != name:
                edges.add((name, imported))
    return edges


def package_edges(package: str, root: Path = ROOT) -> set[tuple[str, str]]:
    """The import edges with every subpackage of `package` taken as one node (`api.chat.*`
    is `api.chat`): the coarse structure of the package."""
    depth = package.count(".") + 2

    def node(module: str) -> str:
        return ".".join(module.split(".")[:depth])

    return {(node(a), node(b)) for a, b in import_edges(package, root) if node(a) != node(b)}


def longest_chain(edges: set[tuple[str, str]]) -> list[str]:
    """The longest import chain (no module twice) through the graph."""
    successors: dict[str, list[str]] = {}
    for importer, imported in edges:
        successors.setdefault(importer, []).append(imported)

    @lru_cache(maxsize=None)
    def chain_from(module: str, seen: frozenset[str]) -> tuple[str, ...]:
        best: tuple[str, ...] = ()
        for nxt in successors.get(module, ()):
            if nxt not in seen:
                candidate = chain_from(nxt, seen | {nxt})
                best = candidate if len(candidate) > len(best) else best
        return (module, *best)

    starts = {importer for importer, _ in edges}
    return list(max((chain_from(m, frozenset({m})) for m in starts), key=len, default=()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package", help="a package under the repository root, e.g. api")
    parser.add_argument("--edges", action="store_true", help="print every edge")
    parser.add_argument("--packages", action="store_true", help="take each subpackage as one node")
    args = parser.parse_args(argv)
    modules = package_modules(args.package)
    edges = package_edges(args.package) if args.packages else import_edges(args.package)
    chain = longest_chain(edges)
    nodes = {node for edge in edges for node in edge} if args.packages else modules
    what = "nodes (modules and subpackages)" if args.packages else "files"
    print(f"{args.package}: {len(nodes)} {what}, {len(edges)} import edges, depth {len(chain)}")
    print("longest chain: " + " -> ".join(chain))
    if args.edges:
        for importer, imported in sorted(edges):
            print(f"  {importer} -> {imported}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
