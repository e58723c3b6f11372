"""SQL projections: declare them, run them as consumer-group members, query them.

    from eventplatform.projections import Projection, Row, Count, Max, merge_column, ...

See ``docs/projections.md``. The declaration (``model``, ``merge``, ``fold``)
is engine-neutral; the streaming runner and the Spark jobs both run it.

The package is the pure model (``model``, ``merge``, ``fold``, ``premerge``,
``batch``, ``apps``, ``errors``) and its adapters (``store``, ``statements``,
``schema``, ``database``, ``corrections``, ``registry``, ``migrate``,
``app_databases``, ``query``: SQLAlchemy; ``kafka``, ``runner``, ``operations``:
librdkafka). Each name below is imported from its module on first use, so
importing the model alone loads neither a client nor an engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventplatform.lazy_exports import lazy_exports

# ``fold`` is also the name of its module, and importing a submodule binds the
# package attribute of its name to the module: bound here, after its module, the
# function stays what ``eventplatform.projections.fold`` names, as before. It is pure.
from eventplatform.projections.fold import fold

if TYPE_CHECKING:
    from eventplatform.projections.app_demo import AppDemo, DemoRun, DemoSimulation, DemoSparkStep
    from eventplatform.projections.apps import App, NamedQuery, installed_apps
    from eventplatform.projections.database import create_store_engine, reading
    from eventplatform.projections.errors import (
        ApplyTimeoutError,
        CheckpointConflictError,
        HandlerError,
        ProjectionDefinitionError,
        ProjectionError,
        ProjectionStoppedError,
    )
    from eventplatform.projections.fold import corrected_history, visible
    from eventplatform.projections.kafka import log_ends
    from eventplatform.projections.merge import (
        Count,
        First,
        Fold,
        Latest,
        Max,
        Merge,
        Min,
        Only,
        SetAdd,
        Sum,
    )
    from eventplatform.projections.model import (
        MIGRATION_INDEXES,
        Projection,
        Row,
        TablePlan,
        merge_column,
        projection_table,
    )
    from eventplatform.projections.operations import (
        projection_status,
        retry_dead_letters,
        run_projection,
        wait_until_applied,
    )

_EXPORTS: dict[str, str] = {
    "App": "eventplatform.projections.apps",
    "ApplyTimeoutError": "eventplatform.projections.errors",
    "CheckpointConflictError": "eventplatform.projections.errors",
    "Count": "eventplatform.projections.merge",
    "First": "eventplatform.projections.merge",
    "Fold": "eventplatform.projections.merge",
    "HandlerError": "eventplatform.projections.errors",
    "Latest": "eventplatform.projections.merge",
    "Max": "eventplatform.projections.merge",
    "Merge": "eventplatform.projections.merge",
    "Min": "eventplatform.projections.merge",
    "Only": "eventplatform.projections.merge",
    "Projection": "eventplatform.projections.model",
    "ProjectionDefinitionError": "eventplatform.projections.errors",
    "ProjectionError": "eventplatform.projections.errors",
    "ProjectionStoppedError": "eventplatform.projections.errors",
    "Row": "eventplatform.projections.model",
    "SetAdd": "eventplatform.projections.merge",
    "Sum": "eventplatform.projections.merge",
    "TablePlan": "eventplatform.projections.model",
    "corrected_history": "eventplatform.projections.fold",
    "fold": "eventplatform.projections.fold",
    "installed_apps": "eventplatform.projections.apps",
    "merge_column": "eventplatform.projections.model",
    "projection_status": "eventplatform.projections.operations",
    "projection_table": "eventplatform.projections.model",
    "retry_dead_letters": "eventplatform.projections.operations",
    "run_projection": "eventplatform.projections.operations",
    "visible": "eventplatform.projections.fold",
    "wait_until_applied": "eventplatform.projections.operations",
    "AppDemo": "eventplatform.projections.app_demo",
    "DemoRun": "eventplatform.projections.app_demo",
    "DemoSimulation": "eventplatform.projections.app_demo",
    "DemoSparkStep": "eventplatform.projections.app_demo",
    "NamedQuery": "eventplatform.projections.apps",
    "create_store_engine": "eventplatform.projections.database",
    "reading": "eventplatform.projections.database",
    "log_ends": "eventplatform.projections.kafka",
    "MIGRATION_INDEXES": "eventplatform.projections.model",
}
"""Each exported name and the module that defines it (one line per name)."""

__all__ = [
    "MIGRATION_INDEXES",
    "App",
    "AppDemo",
    "ApplyTimeoutError",
    "CheckpointConflictError",
    "Count",
    "DemoRun",
    "DemoSimulation",
    "DemoSparkStep",
    "First",
    "Fold",
    "HandlerError",
    "Latest",
    "Max",
    "Merge",
    "Min",
    "NamedQuery",
    "Only",
    "Projection",
    "ProjectionDefinitionError",
    "ProjectionError",
    "ProjectionStoppedError",
    "Row",
    "SetAdd",
    "Sum",
    "TablePlan",
    "corrected_history",
    "create_store_engine",
    "fold",
    "installed_apps",
    "log_ends",
    "merge_column",
    "projection_status",
    "projection_table",
    "reading",
    "retry_dead_letters",
    "run_projection",
    "visible",
    "wait_until_applied",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
