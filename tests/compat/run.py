"""Run librdkafka's own test suite against this project's broker, and judge the run.

``make compat`` runs every broker test numbered 0001-0150 on one ``platform serve`` and on
a 3-node ``LocalCluster``; ``make compat-quick`` (CI) runs the quick list of
``expectations.toml`` on one broker. Both build the suite first into ``build/compat/``.

Each test number runs alone (``test-runner -p1 -L``, full mode, ``TESTS=<number>``) with a
bound on its time, against a broker set up for its scenario: ``num.partitions=4`` as the
suite's default scenario expects, and ``auto.create.topics.enable=false`` for the tests
of the ``noautocreate`` scenario, which run last on a fresh broker or cluster. Each
runner's output is kept in ``build/compat/<setup>/logs/``, with the broker's log beside it,
and the results in ``build/compat/<setup>/results.json``.

The exit status is 0 when every test passed except those ``expectations.toml`` lists for
the setup, and none of those passed; 1 otherwise. See docs/compatibility.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from eventplatform.local_cluster import CERTIFICATES_DIRECTORY
from eventplatform.log.replica.selector import RACK_AWARE
from eventplatform.testing import BrokerProcess, LocalCluster
from tests.compat.librdkafka_suite import (
    CRASHED,
    FAILED,
    TIMED_OUT,
    Result,
    SuiteTest,
    broker_tests,
    first_failures,
    load_expectations,
    parse_summary,
    runs,
    verdicts,
)
from tests.compat.ssl_files import SslFiles, write_ssl_files

HERE = Path(__file__).resolve().parent
EXPECTATIONS = HERE / "expectations.toml"
KAFKA_VERSION = "4.0.0"
"""The broker version the suite is told, which decides the APIs it expects (Kafka 4.0)."""
TIMEOUT_MULTIPLIER = 2.0
"""The suite's own per-test timeouts, stretched for a shared 2-core machine."""
TEST_TIMEOUT_S = 600.0
LONG_TEST_TIMEOUT_S = {"0113": 1500.0}
"""The bound on one runner invocation; 0113 (cooperative rebalancing) runs for minutes."""
QUICK_TEST_TIMEOUT_S = 120.0
QUICK_BUDGET_S = 300.0
"""The quick run's bound on each test and on the whole run."""
CLUSTER_NODES = 3
BROKER_SETTINGS = ("num.partitions=4", "log.retention.check.interval.ms=3600000")
"""The default scenario's partition count; and retention passes an hour apart, since 0052
writes records stamped in January 1970, which a pass landing between its produce and its
consume deletes (as Kafka's would, every 5 minutes by default)."""
SCENARIO_SETTINGS = {"default": (), "noautocreate": ("auto.create.topics.enable=false",)}
CLUSTER_SETTINGS = (f"replica.selector.class={RACK_AWARE}",)
SECURED_USER = "admin"
SECURED_PASSWORD = "compat suite's super user"
SECURED_TESTS = ("0081", "0097", "0135", "0142")
"""What the secured setup runs, on a secure 3-node cluster (SASL_SSL for clients, mutual
TLS inside, ACLs on): the admin, SSL, SASL credential and re-authentication tests."""
ADMIN_TIMEOUT_S = 30.0
REAUTH_MS = 10_000
"""``connections.max.reauth.ms`` of the secured broker, for 0142's SCRAM sub-tests."""
CLUSTER_RACK_PREFIX = "RACK"
"""Broker N is in rack RACK<N> and consumers read from a follower in their rack, the
layout 0101 (fetch from follower) looks for."""


@contextmanager
def serving(setup: str, scenario: str, directory: Path) -> Iterator[Server]:
    """A fresh broker (or cluster) for ``scenario`` under ``directory``, killed on exit."""
    settings = [*BROKER_SETTINGS, *SCENARIO_SETTINGS[scenario]]
    server = Server(setup, directory / scenario, settings)
    server.start()
    try:
        yield server
    finally:
        server.kill()


class Server:
    """One broker or a 3-node cluster; restarted in place if it died during a test."""

    def __init__(self, setup: str, directory: Path, settings: Sequence[str]) -> None:
        self.setup = setup
        self.directory = directory
        self.settings = list(settings)
        self.broker: BrokerProcess | None = None
        self.cluster: LocalCluster | None = None
        self.deaths = 0

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.setup == "secured":
            self.cluster = LocalCluster.create(
                self.directory,
                CLUSTER_NODES,
                [*self.settings, *SECURED_SETTINGS],
                secure=True,
            )
            self.cluster.start()
            create_secured_user(self.cluster)
        elif self.setup == "single":
            self.broker = BrokerProcess(self.directory / "data", self.settings).start()
        else:
            self.cluster = LocalCluster.create(
                self.directory,
                CLUSTER_NODES,
                [*self.settings, *CLUSTER_SETTINGS],
                rack_prefix=CLUSTER_RACK_PREFIX,
            )
            self.cluster.start()

    @property
    def bootstrap(self) -> str:
        if self.broker is not None:
            return self.broker.bootstrap
        assert self.cluster is not None
        return self.cluster.client_bootstrap if self.cluster.secure else self.cluster.bootstrap

    def dead(self) -> list[str]:
        """The processes that exited: "broker", or "node <id>" of the cluster."""
        if self.broker is not None:
            process = self.broker.process
            return ["broker"] if process is None or process.poll() is not None else []
        assert self.cluster is not None
        return [f"node {n}" for n in self.cluster.nodes if not self.cluster.running(n)]

    def revive(self) -> None:
        self.deaths += 1
        if self.broker is not None:
            self.save_log()
            self.broker.start()
        elif self.cluster is not None:
            self.cluster.start()

    def save_log(self) -> None:
        if self.broker is not None:
            with (self.directory / "broker.log").open("a") as log:
                log.write(self.broker.log_text())
            self.broker.output.clear()

    def kill(self) -> None:
        if self.broker is not None:
            self.broker.kill()
            self.save_log()
        if self.cluster is not None:
            for node_id in self.cluster.nodes:
                self.cluster.kill(node_id)


def run_number(
    test_runner: Path,
    number: str,
    scenario: str,
    tests: Sequence[SuiteTest],
    conf: Path,
    bootstrap: str,
    log_path: Path,
    timeout_s: float,
    environment: dict[str, str] | None = None,
) -> list[Result]:
    """One runner invocation: the results of ``number``'s tests of ``scenario``."""
    library = test_runner.parent.parent
    env = {
        **os.environ,
        **(environment or {}),
        "TESTS": number,
        "RDKAFKA_TEST_CONF": str(conf),
        "TEST_KAFKA_VERSION": KAFKA_VERSION,
        "TEST_MODE": "bare",
        "LD_LIBRARY_PATH": f"{library}/src:{library}/src-cpp",
        "KAFKA_PATH": str(conf.parent / "kafka"),
        "BROKERS": bootstrap,
    }
    command = [str(test_runner), "-p1", "-L", "-s", scenario]
    started = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=test_runner.parent,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            process.wait(timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    seconds = time.monotonic() - started
    output = log_path.read_text(errors="replace")
    found = {r.name: r for r in parse_summary(output)}
    failures = first_failures(output)
    expected = [t.name for t in tests if t.number == number and t.scenario.startswith(scenario)]
    lost = TIMED_OUT if timed_out else CRASHED
    end = f"ran past {timeout_s:.0f} s" if timed_out else "exited before its summary"
    results = []
    for name in expected:
        if name in found:
            results.append(found[name])
        elif name in failures:
            results.append(Result(name, FAILED, round(seconds, 1), failures[name]))
        else:
            results.append(Result(name, lost, round(seconds, 1), f"the runner {end}"))
    return results


def write_kafka_tools(work: Path) -> None:
    """``<work>/kafka/bin/kafka-topics.sh``, the stand-in the suite finds under KAFKA_PATH."""
    script = work / "kafka" / "bin" / "kafka-topics.sh"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "kafka_topics.py"}" "$@"\n')
    script.chmod(0o755)


SECURED_SETTINGS = (
    "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    f"connections.max.reauth.ms={REAUTH_MS}",
    f"super.users=User:CN=broker;User:CN=admin;User:{SECURED_USER}",
)
"""A secure cluster's settings (see LocalCluster), and the suite's SCRAM user as a
super user: its tests create topics, ACLs and users."""


def create_secured_user(cluster: LocalCluster) -> None:
    """The suite's SCRAM user, made with the operator's certificate."""
    admin = AdminClient(cluster.admin_settings())
    upsertions: list[Any] = [
        UserScramCredentialUpsertion(
            SECURED_USER, ScramCredentialInfo(mechanism, 4096), SECURED_PASSWORD.encode()
        )
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    ]
    for future in admin.alter_user_scram_credentials(upsertions).values():
        future.result(ADMIN_TIMEOUT_S)


def write_conf(
    path: Path,
    bootstrap: str,
    *,
    secured_directory: Path | None = None,
    ssl: SslFiles | None = None,
) -> None:
    lines = [
        f"bootstrap.servers={bootstrap}",
        f"test.timeout.multiplier={TIMEOUT_MULTIPLIER}",
        "test.topic.random=true",
    ]
    if secured_directory is not None:
        lines += [
            "security.protocol=SASL_SSL",
            "sasl.mechanisms=SCRAM-SHA-512",
            f"sasl.username={SECURED_USER}",
            f"sasl.password={SECURED_PASSWORD}",
            f"ssl.ca.location={secured_directory / CERTIFICATES_DIRECTORY / 'ca.pem'}",
        ]
    if ssl is not None:
        lines += [f"{name}={value}" for name, value in ssl.settings.items()]
    path.write_text("".join(f"{line}\n" for line in lines))


def run_setup(args: argparse.Namespace, tests: Sequence[SuiteTest], work: Path) -> list[Result]:
    """Every chosen (number, scenario) in order, each scenario on its own fresh server."""
    chosen = set(args.tests.split(",")) if args.tests else None
    pairs = [(n, s) for n, s in runs(tests) if chosen is None or n in chosen]
    budget_end = time.monotonic() + QUICK_BUDGET_S if args.quick else None
    results: list[Result] = []
    (work / "logs").mkdir(parents=True, exist_ok=True)
    write_kafka_tools(work)
    for scenario in dict.fromkeys(s for _, s in pairs):
        with serving(args.setup, scenario, work / "servers") as server:
            conf = work / f"test-{scenario}.conf"
            secured = server.directory if args.setup == "secured" else None
            ssl = None
            if secured is not None:  # 0097's client certificate, in every form it loads
                ssl = write_ssl_files(secured / CERTIFICATES_DIRECTORY, work / "ssl")
            write_conf(conf, server.bootstrap, secured_directory=secured, ssl=ssl)
            for number, _ in (p for p in pairs if p[1] == scenario):
                timeout_s = QUICK_TEST_TIMEOUT_S if args.quick else TEST_TIMEOUT_S
                timeout_s = LONG_TEST_TIMEOUT_S.get(number, timeout_s)
                if budget_end is not None and time.monotonic() > budget_end:
                    raise SystemExit(f"the quick run went past its {QUICK_BUDGET_S:.0f} s budget")
                log = work / "logs" / f"{number}-{scenario}.log"
                batch = run_number(
                    args.test_runner,
                    number,
                    scenario,
                    tests,
                    conf,
                    server.bootstrap,
                    log,
                    timeout_s,
                    None if ssl is None else ssl.environment,
                )
                dead = server.dead()
                if dead:
                    print(f"  !! {', '.join(dead)} exited during {number}; started again")
                    server.revive()
                for result in batch:
                    print(
                        f"{result.name:<50} {result.outcome:<8} {result.seconds:7.1f}s {result.why}"
                    )
                    sys.stdout.flush()
                results += batch
    return results


def report(
    results: Sequence[Result], catalogue: Sequence[str], args: argparse.Namespace, work: Path
) -> int:
    expectations = load_expectations(EXPECTATIONS, catalogue)
    unexpected, stale = verdicts(results, expectations, args.setup)
    counts: dict[str, int] = {}
    for result in results:
        counts[result.outcome] = counts.get(result.outcome, 0) + 1
    listed = sum(
        1 for r in results if args.setup in getattr(expectations.get(r.name), "setups", ())
    )
    payload = {
        "setup": args.setup,
        "quick": args.quick,
        "results": [asdict(r) for r in results],
        "counts": counts,
    }
    (work / "results.json").write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2))
    print(
        f"\n{args.setup}: {len(results)} tests, " + ", ".join(f"{n} {k}" for k, n in counts.items())
    )
    print(f"expected not to pass here: {listed} (docs/compatibility.md)")
    for result in unexpected:
        print(f"UNEXPECTED {result.outcome}: {result.name} {result.why}")
    for result in stale:
        print(f"PASSED BUT LISTED AS EXPECTED NOT TO: {result.name} (update expectations.toml)")
    return 1 if unexpected or stale else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--test-runner", type=Path, required=True)
    parser.add_argument("--setup", choices=("single", "cluster", "secured"), default="single")
    parser.add_argument("--quick", action="store_true", help="only the quick list")
    parser.add_argument("--tests", help="comma-separated test numbers (default: all)")
    parser.add_argument("--work-dir", type=Path, default=Path("build/compat"))
    args = parser.parse_args(argv)
    args.test_runner = args.test_runner.resolve()
    tests = broker_tests((args.test_runner.parent / "test.c").read_text())
    catalogue = [t.name for t in tests]
    load_expectations(EXPECTATIONS, catalogue)
    if args.quick:
        quick = tomllib.loads(EXPECTATIONS.read_text())["quick"]["tests"]
        tests = [t for t in tests if t.number in quick]
    if args.setup == "secured":
        tests = [t for t in tests if t.number in SECURED_TESTS]
    work = (args.work_dir / (args.setup + ("-quick" if args.quick else ""))).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.monotonic()
    results = run_setup(args, tests, work)
    status = report(results, catalogue, args, work)
    print(f"took {time.monotonic() - started:.0f} s; logs in {work}")
    return status


if __name__ == "__main__":
    sys.exit(main())
