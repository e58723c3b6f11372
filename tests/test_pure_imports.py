"""The pure model imports alone: no Kafka client, SQL engine, trio, Spark or command line.

Each case runs its imports in a fresh interpreter and reads ``sys.modules`` there,
so a module that an earlier test loaded cannot hide one that the case loads. The
import contract of ``make lint`` says the same of the source; this says it of what
Python actually loads, package ``__init__`` files included.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

TIMEOUT_S = 60
ADAPTER_PACKAGES = frozenset({"confluent_kafka", "sqlalchemy", "trio", "pyspark", "click"})
"""What the pure model must not load: the adapters' libraries."""

PURE_IMPORTS = [
    "import eventplatform.events.model",
    "import eventplatform.events.codec",
    "import eventplatform.events.corrections",
    "import eventplatform.events.compatibility",
    "import eventplatform.events.deciders",
    "import eventplatform.events.erasure",
    "from eventplatform.events import Correction, Envelope, Event, EventCatalog, Position, encode",
    "from eventplatform.events import TYPE_HEADER, EventError, uuid7",
    "import eventplatform.projections.model",
    "import eventplatform.projections.merge",
    "import eventplatform.projections.fold",
    "import eventplatform.projections.batch",
    "import eventplatform.projections.apps",
    "from eventplatform.projections import Count, Max, Projection, Row, TablePlan, merge_column",
    "from eventplatform.projections import corrected_history, fold, visible",
    "import eventplatform.spark_projections.columns",
    "import eventplatform.spark_projections.corrections",
]
"""One case each: statements a user of the pure model writes."""

DECODER_IMPORTS = [
    "import eventplatform.events.wire",
    "import eventplatform.spark_projections.columns",
]
"""Imports of each Python worker Spark starts to decode records: no pydantic either."""


def loaded_modules(statement: str, tmp_path: Path) -> set[str]:
    """The modules a fresh interpreter holds after running ``statement``."""
    code = f"{statement}\nimport sys\nprint('\\n'.join(sys.modules))"
    completed = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert completed.returncode == 0, completed.stderr
    return set(completed.stdout.split())


def of_packages(modules: set[str], packages: frozenset[str]) -> list[str]:
    return sorted(name for name in modules if name.split(".", 1)[0] in packages)


@pytest.mark.parametrize("statement", PURE_IMPORTS)
def test_the_pure_model_loads_no_adapter(statement: str, tmp_path: Path) -> None:
    assert of_packages(loaded_modules(statement, tmp_path), ADAPTER_PACKAGES) == []


@pytest.mark.parametrize("statement", DECODER_IMPORTS)
def test_the_spark_decoder_loads_no_event_models(statement: str, tmp_path: Path) -> None:
    forbidden = ADAPTER_PACKAGES | {"pydantic"}
    assert of_packages(loaded_modules(statement, tmp_path), forbidden) == []


@pytest.mark.parametrize(
    ("statement", "library"),
    [
        ("from eventplatform.events import EventProducer", "confluent_kafka"),
        ("from eventplatform.projections import run_projection", "sqlalchemy"),
        ("import eventplatform.projections.store", "sqlalchemy"),
    ],
)
def test_an_adapter_loads_its_library(statement: str, library: str, tmp_path: Path) -> None:
    """The check above sees an adapter: importing one loads its library."""
    assert library in of_packages(loaded_modules(statement, tmp_path), ADAPTER_PACKAGES)


PACKAGES = ["eventplatform.events", "eventplatform.projections", "eventplatform.spark_projections"]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_export_resolves_to_its_module_value(name: str) -> None:
    """Each name of ``__all__`` has a module in the table, and is that module's value."""
    package = importlib.import_module(name)
    exports: dict[str, str] = package._EXPORTS
    assert sorted(exports) == sorted(package.__all__)
    for export, module_name in exports.items():
        module: ModuleType = importlib.import_module(module_name)
        assert getattr(package, export) is getattr(module, export), export
    assert set(package.__all__) <= set(dir(package))


@pytest.mark.parametrize("name", PACKAGES)
def test_exports_still_resolve_once_every_module_of_the_package_is_imported(
    name: str, tmp_path: Path
) -> None:
    """Regression: importing a submodule binds its name on the package, so a module
    named like an export (``projections.corrected_history``, beside the function of
    that name) turned the export into the module once anything had imported it."""
    package = importlib.import_module(name)
    modules = [f"{name}.{info.name}" for info in pkgutil.iter_modules(package.__path__)]
    script = "\n".join(
        [
            "import importlib",
            f"import {name} as package",
            *(f"importlib.import_module({module!r})" for module in modules),
            "exports = package._EXPORTS",
            "wrong = [n for n, m in exports.items()",
            "         if getattr(package, n) is not getattr(importlib.import_module(m), n)]",
            "print(wrong)",
        ]
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    assert completed.stdout.strip() == "[]", completed.stdout


@pytest.mark.parametrize("name", PACKAGES)
def test_an_unknown_name_is_an_attribute_error(name: str) -> None:
    package = importlib.import_module(name)
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = package.no_such_name
