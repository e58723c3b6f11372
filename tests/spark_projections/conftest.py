"""One SparkSession for every Spark test (``local[2]``), and the usual databases.

Python workers import the test support modules that define projections, so
``tests/support`` goes on ``PYTHONPATH`` before the session starts; they run
this interpreter (``PYSPARK_PYTHON``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eventplatform.testing import fresh_database

SUPPORT = Path(__file__).resolve().parent.parent / "support"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from eventplatform.spark_projections.session import spark_session

    os.environ["PYSPARK_PYTHON"] = sys.executable
    paths = [str(SUPPORT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    session = spark_session(
        "local[2]",
        {"spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "4"},
        app_name="eventplatform-tests",
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database(request.param, tmp_path) as url:
        yield url
