"""Errors of the Spark data source and the replay jobs."""

from __future__ import annotations


class ReplayError(Exception):
    """A replay or a read of the log cannot go on; the message says why."""


class ReplayConfigError(ReplayError):
    """An option or setting is malformed or names something that does not exist."""


class OffsetRangeError(ReplayError):
    """An offset lies outside a partition's log: below its start or past its high watermark."""


class UnknownTopicError(ReplayConfigError):
    """A topic named in the options does not exist in the cluster or the data directory."""
