"""The repository layout keeps the standard library's ``platform`` module reachable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_platform_folder_is_not_a_regular_package() -> None:
    assert (ROOT / "platform").is_dir()
    assert not (ROOT / "platform" / "__init__.py").exists()


def test_standard_platform_module_wins_from_the_repository_root() -> None:
    code = (
        "import sqlalchemy, platform; "
        "print(platform.python_implementation()); "
        "print(platform.__file__)"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 0, completed.stderr
    implementation, module_file = completed.stdout.split()
    assert implementation == "CPython"
    assert not Path(module_file).resolve().is_relative_to(ROOT / "platform")


def test_eventplatform_namespace_maps_the_top_level_folders() -> None:
    import eventplatform.cli
    import eventplatform.log.storage

    assert Path(eventplatform.cli.__file__).parent == ROOT / "platform"
    assert Path(eventplatform.log.storage.__file__).parent == ROOT / "log" / "storage"
