"""The shape of api/: a shared core and one package per dialect, each with the same stages,
and no dialect importing another (so a feature added to the core reaches all four)."""

from __future__ import annotations

import pytest

from tools.import_graph import ROOT, import_edges, package_modules

DIALECTS = ("completions", "chat", "responses", "messages")
STAGES = ("body", "fields", "plan", "render", "route")


def dialect_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in DIALECTS else None


def test_no_dialect_package_imports_another():
    crossings = [(importer, imported) for importer, imported in import_edges("api")
                 if dialect_of(importer) and dialect_of(imported) and dialect_of(importer) != dialect_of(imported)]
    assert crossings == []


def test_a_dialect_imports_only_the_core_and_itself_of_api():
    """Besides generated/ and engine/, which are outside api/."""
    strays = [(importer, imported) for importer, imported in import_edges("api")
              if dialect_of(importer) and not imported.startswith(("api.core", f"api.{dialect_of(importer)}"))]
    assert strays == []


def test_the_core_imports_no_dialect():
    assert [edge for edge in import_edges("api") if edge[0].startswith("api.core") and dialect_of(edge[1])] == []


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_dialect_has_the_same_stages(dialect):
    modules = package_modules(f"api.{dialect}")
    assert {f"api.{dialect}.{stage}" for stage in STAGES} <= set(modules)


def test_the_root_holds_only_packages():
    """The server's own modules live in api/server, the served contract in api/openapi."""
    loose = [name for name, path in package_modules("api").items() if path.parent == ROOT / "api" and name != "api"]
    assert loose == []


def test_the_import_check_sees_a_crossing(tmp_path):
    """A positive control: an import from one dialect package into another is an edge."""
    for name, source in (("chat/__init__.py", ""), ("chat/plan.py", "from api.messages import plan\n"),
                         ("messages/__init__.py", ""), ("messages/plan.py", "")):
        (tmp_path / "api" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "api" / name).write_text(source)
    (tmp_path / "api" / "__init__.py").write_text("")
    assert ("api.chat.plan", "api.messages.plan") in import_edges("api", tmp_path)
