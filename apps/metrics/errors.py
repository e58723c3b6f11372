"""The metrics app's one exception base."""

from __future__ import annotations

from eventplatform.projections import ProjectionError


class MetricsError(ProjectionError):
    """A metrics command cannot do what it was asked (the message says why)."""
