"""The background fsync of a partition log: prepared on the log owner's thread
(:meth:`PartitionLog.start_flush`), run on any (:func:`run_flush_jobs`), concluded
back on the owner's (:meth:`PartitionLog.finish_flush`)."""

from __future__ import annotations

import os
from typing import NamedTuple


class FlushJob(NamedTuple):
    """A periodic fsync prepared by :meth:`PartitionLog.start_flush` for another thread.

    ``descriptors`` are duplicates of the files' descriptors, so the fsync stays
    safe while the owner rolls, deletes or closes segments meanwhile; the job
    covers the log up to ``end_offset``, appended before it was made.
    """

    end_offset: int
    truncations: int
    descriptors: tuple[int, ...]


def run_flush_jobs(jobs: list[FlushJob]) -> list[OSError | None]:
    """fsync every file of the jobs and close the duplicated descriptors (any thread).

    Returns each job's error (None when every fsync of it succeeded), for
    :meth:`PartitionLog.finish_flush`; a job stops at its first failed fsync."""
    errors: list[OSError | None] = []
    for job in jobs:
        error: OSError | None = None
        for descriptor in job.descriptors:
            try:
                if error is None:
                    os.fsync(descriptor)
            except OSError as exc:
                error = exc
            finally:
                os.close(descriptor)
        errors.append(error)
    return errors
