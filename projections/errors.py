"""The projection layer's exceptions.

ProjectionError
├── ProjectionDefinitionError  a projection, table or row is declared wrongly
├── HandlerError               a handler raised or returned something invalid (a poison event)
├── CheckpointConflictError    another runner advanced a partition first (this batch is void)
├── ProjectionStoppedError     a poison event stopped a projection whose policy is "stop"
├── DefinitionChangedError     its tables were built under another definition: rebuild them
├── ApplyTimeoutError          read-your-writes: the projection did not reach the positions
├── StoreError                 the SQL store failed in a way a retry will not fix
└── MigrationError             the schema could not be migrated (bad revision, failed DDL)
"""

from __future__ import annotations


class ProjectionError(Exception):
    """Base of every error the projection layer raises."""


class ProjectionDefinitionError(ProjectionError, TypeError):
    """A projection, table or row contribution is declared wrongly."""


class HandlerError(ProjectionError):
    """A handler raised, or returned something that is not a row contribution."""


class CheckpointConflictError(ProjectionError):
    """A partition's checkpoint moved under this runner: another member owns it now."""


class ProjectionStoppedError(ProjectionError):
    """A poison event stopped a projection whose policy is ``stop``."""


class DefinitionChangedError(ProjectionError):
    """The projection's tables were built under another definition than the one running:
    applying events on top would mix the two, so the tables need a rebuild first."""


class ApplyTimeoutError(ProjectionError, TimeoutError):
    """A projection did not apply the awaited positions within the deadline."""


class StoreError(ProjectionError):
    """The SQL store failed in a way a retry will not fix."""


class MigrationError(ProjectionError):
    """The SQL schema could not be migrated: an unknown revision, a broken chain, failed DDL."""
