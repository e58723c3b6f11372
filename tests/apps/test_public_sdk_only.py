"""Apps import only the public SDK: what a user's app outside the repository could import.

Every module under ``apps/`` (and the guestbook of ``tests/platform/external_app``,
which stands for a user's app) may import from ``eventplatform`` only:

- its own app package, ``eventplatform.apps.<its folder>...``;
- a name that ``eventplatform.events``, ``eventplatform.projections`` or
  ``eventplatform.spark_projections`` lists in ``__all__``, from the package itself;
- a name of ``eventplatform.cli_support.__all__``, the command-line support.

So ``from eventplatform.projections.database import reading`` fails here, as
does ``from eventplatform.projections import database`` (a submodule, not an
export) and any import of another app. The scan reads the source (``ast``),
so imports inside functions and under ``TYPE_CHECKING`` count too.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ROOT / "apps"
EXTERNAL_APP = ROOT / "tests" / "platform" / "external_app"
PUBLIC_PACKAGES = (
    "eventplatform.events",
    "eventplatform.projections",
    "eventplatform.spark_projections",
    "eventplatform.cli_support",
)


def exports(module: str) -> frozenset[str]:
    return frozenset(importlib.import_module(module).__all__)


def violations(source: str, own_package: str) -> Iterator[str]:
    """Each import of ``source`` that reaches past the public SDK, as ``line: import``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _allowed_module(alias.name, own_package):
                    yield f"{node.lineno}: import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if not _allowed_name(node.module, alias.name, own_package):
                    yield f"{node.lineno}: from {node.module} import {alias.name}"


def _allowed_module(module: str, own_package: str) -> bool:
    """``import x.y``: the platform only as the public packages themselves."""
    if not module.startswith("eventplatform.") and module != "eventplatform":
        return True
    return module in PUBLIC_PACKAGES or _within(module, own_package)


def _allowed_name(module: str, name: str, own_package: str) -> bool:
    if not module.startswith("eventplatform.") and module != "eventplatform":
        return True
    if _within(module, own_package):
        return True
    return module in PUBLIC_PACKAGES and name in exports(module)


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def app_modules() -> Iterator[tuple[Path, str]]:
    """Every module of a bundled app with its package, and the external app's."""
    for folder in sorted(path for path in APPS.iterdir() if (path / "__init__.py").exists()):
        for module in sorted(folder.rglob("*.py")):
            yield module, f"eventplatform.apps.{folder.name}"
    for module in sorted(EXTERNAL_APP.rglob("*.py")):
        yield module, "external_app"


@pytest.mark.parametrize(
    ("module", "own_package"),
    list(app_modules()),
    ids=lambda value: str(value.relative_to(ROOT)) if isinstance(value, Path) else "",
)
def test_the_app_imports_only_the_public_sdk(module: Path, own_package: str) -> None:
    assert list(violations(module.read_text(), own_package)) == []


def test_the_scan_finds_every_kind_of_reach_past_the_sdk() -> None:
    source = "\n".join(
        [
            "from eventplatform.projections.database import reading",  # an internal module
            "from eventplatform.projections import database",  # a submodule, not an export
            "import eventplatform.events.batching",
            "from eventplatform.apps.metrics.sketch import representative",  # another app
            "from eventplatform.db_cli import database_option",  # the platform's own CLI
            "from eventplatform.projections import NotExported",
            "def later():",
            "    from eventplatform.spark_projections.replay import rebuild",
        ]
    )
    found = list(violations(source, "eventplatform.apps.activity_tracking"))
    assert [line.split(":")[0] for line in found] == ["1", "2", "3", "4", "5", "6", "8"]


def test_the_scan_lets_the_public_sdk_and_the_own_app_pass() -> None:
    source = "\n".join(
        [
            "import click",
            "from sqlalchemy import select",
            "import eventplatform.events",
            "from eventplatform.events import Event, EventProducer, AppendQueue",
            "from eventplatform.projections import App, NamedQuery, reading, log_ends",
            "from eventplatform.spark_projections import ReplayRequest, backfill",
            "from eventplatform.cli_support import bootstrap_option, reported_errors",
            "from eventplatform.apps.metrics.events import MetricPoint",
            "from .sketch import representative",
        ]
    )
    assert list(violations(source, "eventplatform.apps.metrics")) == []


def test_every_bundled_app_is_scanned() -> None:
    scanned = {package for _, package in app_modules()}
    assert {
        "eventplatform.apps.activity_tracking",
        "eventplatform.apps.metrics",
        "eventplatform.apps.log_aggregation",
        "external_app",
    } <= scanned
