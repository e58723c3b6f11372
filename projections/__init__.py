"""SQL projections: declare them, run them as consumer-group members, query them.

    from eventplatform.projections import Projection, Row, Count, Max, merge_column, ...

See ``docs/projections.md``. The declaration (``model``, ``merge``, ``fold``)
is engine-neutral; the streaming runner and the Spark jobs both run it.
"""

from eventplatform.projections.apps import App, installed_apps
from eventplatform.projections.errors import (
    ApplyTimeoutError,
    CheckpointConflictError,
    HandlerError,
    ProjectionDefinitionError,
    ProjectionError,
    ProjectionStoppedError,
)
from eventplatform.projections.fold import corrected_history, fold, visible
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

__all__ = [
    "App",
    "ApplyTimeoutError",
    "CheckpointConflictError",
    "Count",
    "First",
    "Fold",
    "HandlerError",
    "Latest",
    "Max",
    "Merge",
    "Min",
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
    "fold",
    "installed_apps",
    "merge_column",
    "projection_status",
    "projection_table",
    "retry_dead_letters",
    "run_projection",
    "visible",
    "wait_until_applied",
]

# exports for apps
from eventplatform.projections.app_demo import AppDemo, DemoRun, DemoSimulation, DemoSparkStep
from eventplatform.projections.apps import NamedQuery
from eventplatform.projections.database import create_store_engine, reading
from eventplatform.projections.kafka import log_ends
from eventplatform.projections.model import MIGRATION_INDEXES

__all__ += [
    "MIGRATION_INDEXES",
    "AppDemo",
    "DemoRun",
    "DemoSimulation",
    "DemoSparkStep",
    "NamedQuery",
    "create_store_engine",
    "log_ends",
    "reading",
]
