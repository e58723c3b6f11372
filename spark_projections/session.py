"""The SparkSession the replay jobs run in.

The master comes from ``--spark-master``, else ``$EVENTPLATFORM_SPARK_MASTER``,
else ``local[*]``. ``spark.*`` settings come from the caller (the CLI's
``--spark-conf KEY=VALUE``) and from ``$EVENTPLATFORM_SPARK_CONF``
(``KEY=VALUE`` pairs separated by commas); the caller's win.

Python workers run the driver's interpreter (``PYSPARK_PYTHON`` defaults to
``sys.executable``), so on a standalone cluster every worker host needs the
same environment at the same path: eventplatform installed, and the modules
that define the projections importable.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from eventplatform.spark_projections.errors import ReplayConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MASTER_ENV = "EVENTPLATFORM_SPARK_MASTER"
CONF_ENV = "EVENTPLATFORM_SPARK_CONF"
MASTER_DEFAULT = "local[*]"
APP_NAME_DEFAULT = "eventplatform"

DEFAULTS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "true",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
}
"""What the platform sets unless told otherwise. Shuffles are small (one row per
projection row, not per event), so a few shuffle partitions suffice."""


def master_of(master: str | None) -> str:
    return master or os.environ.get(MASTER_ENV) or MASTER_DEFAULT


def settings_of(pairs: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``spark.*`` settings: defaults, then ``$EVENTPLATFORM_SPARK_CONF``, then ``pairs``."""
    settings = dict(DEFAULTS)
    settings.update(parse_pairs(os.environ.get(CONF_ENV, ""), source=f"${CONF_ENV}"))
    settings.update(pairs or {})
    for key in settings:
        if not key.startswith("spark."):
            raise ReplayConfigError(f"{key!r} is not a spark.* setting")
    return settings


def parse_pairs(text: str, *, source: str) -> dict[str, str]:
    """``KEY=VALUE,KEY=VALUE`` as a dict; a pair without ``=`` is an error."""
    pairs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ReplayConfigError(f"{source}: {item!r} is not KEY=VALUE")
        pairs[key.strip()] = value.strip()
    return pairs


def spark_session(
    master: str | None = None,
    settings: Mapping[str, str] | None = None,
    app_name: str = APP_NAME_DEFAULT,
) -> SparkSession:
    """Get or create the session, with the ``eventlog`` data source registered."""
    from pyspark.sql import SparkSession

    from eventplatform.spark_projections.source import EventLogDataSource

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master_of(master)).appName(app_name)
    for key, value in settings_of(settings).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.dataSource.register(EventLogDataSource)
    return session
