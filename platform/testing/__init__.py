"""Launchers of local processes for the tests and the benchmarks.

``tests/`` and ``bench/`` import them from here, as any installed module::

    from eventplatform.testing import BrokerProcess, LocalCluster, fresh_database

- :class:`BrokerProcess` runs one ``platform serve`` on a free port and can stop, kill
  and restart it; :func:`running_broker` is the same as a context manager.
- :class:`LocalCluster` (from :mod:`eventplatform.local_cluster`, which
  ``platform cluster up`` runs too) lays out and runs a cluster of ``platform serve``
  processes, one per node.
- :class:`LocalClusterBroker` and :func:`running_local_cluster` put a 3-node
  :class:`LocalCluster` where a :class:`BrokerProcess` would be.
- :func:`fresh_database` yields the URL of an empty SQLite or PostgreSQL database.
- :func:`wait_until` polls a condition with a deadline.

Every wait is bounded; a process that does not start in time is killed and its output
is in the error.
"""

from eventplatform.local_cluster import LocalCluster
from eventplatform.testing.broker_process import (
    BrokerProcess,
    LocalClusterBroker,
    running_broker,
    running_local_cluster,
    wait_until,
)
from eventplatform.testing.databases import (
    POSTGRES_ADMIN_URL,
    fresh_database,
    fresh_postgres_database,
)

__all__ = [
    "POSTGRES_ADMIN_URL",
    "BrokerProcess",
    "LocalCluster",
    "LocalClusterBroker",
    "fresh_database",
    "fresh_postgres_database",
    "running_broker",
    "running_local_cluster",
    "wait_until",
]
