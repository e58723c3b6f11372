# Two entry points: `make demo` and `make test`. Each creates or refreshes .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PACKAGES := platform log projections spark_projections apps

.PHONY: demo test lint typecheck pytest venv bench-storage bench-broker bench-projections bench-entities bench-corrections bench-producer bench-read-your-writes bench-batch-cost bench-request-cost bench-replay bench-replay-kafka bench-collector bench-log-tail bench-replication bench-security bench bench-quick sim faults entity-race exactly-once replay-equivalence compat compat-secured compat-quick compat-build clean

venv: $(STAMP)

$(STAMP): pyproject.toml spark_projections/_columns.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/platform demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# mypy cannot follow the package-dir mapping of an editable install, so it
# checks a tree of symlinks laid out by import name.
TYPECHECK_TREE := build/typecheck
typecheck: $(STAMP)
	rm -rf $(TYPECHECK_TREE) && mkdir -p $(TYPECHECK_TREE)/eventplatform
	for entry in platform/*; do ln -s "$(CURDIR)/$$entry" $(TYPECHECK_TREE)/eventplatform/; done
	for package in log projections spark_projections apps migrations; do ln -s "$(CURDIR)/$$package" $(TYPECHECK_TREE)/eventplatform/$$package; done
	cd $(TYPECHECK_TREE) && $(abspath $(BIN))/mypy --config-file $(CURDIR)/pyproject.toml -p eventplatform

# Most tests run on two workers. Those marked alone (clusters, Spark jobs, real
# clients, timed kills: tests/conftest.py) run one at a time, since they would only
# compete for the cores; they spend much of their time waiting, so the deterministic
# simulations (pure CPU on a mock clock, indifferent to timing) run beside them at the
# lowest priority, on what CPU they leave.
pytest: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m "not alone" --ignore=tests/sim
	mkdir -p build
	nice -n 19 $(BIN)/python -m pytest -p no:cacheprovider tests/sim >build/sim.log 2>&1 & sim=$$!; \
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python -m pytest -m alone --ignore=tests/sim; \
	alone=$$?; wait $$sim; simulated=$$?; \
	echo "tests/sim (run beside the tests marked alone):"; cat build/sim.log; \
	test $$alone = 0 && test $$simulated = 0

test: lint typecheck pytest

bench-storage: $(STAMP)
	$(BIN)/python -m bench.storage

bench-broker: $(STAMP)
	$(BIN)/python -m bench.broker

# The projection benchmark also runs the eventsourcing library, from the bench extra.
BENCH_STAMP := $(VENV)/.installed-bench
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench-projections: $(BENCH_STAMP)
	$(BIN)/python -m bench.projections

# Corrections beside ordinary events (invertible, non-invertible and fold tables; spread and hot
# keys; a bulk retraction), the SDK's append beside a raw producer, and read-your-writes latency.
bench-corrections: $(STAMP)
	mkdir -p build && $(BIN)/python -m bench.corrections --json build/bench-corrections.json

bench-producer: $(STAMP)
	mkdir -p build && $(BIN)/python -m bench.producer --json build/bench-producer.json

bench-read-your-writes: $(STAMP)
	mkdir -p build && $(BIN)/python -m bench.read_your_writes --json build/bench-read-your-writes.json

bench-batch-cost: $(STAMP)
	mkdir -p build && $(BIN)/python -m bench.batch_cost --json build/bench-batch-cost.json

# Entities: conditional appends, entity loads in a 10-million-event partition, version memory,
# and commands beside the eventsourcing library on PostgreSQL (about 20 minutes).
bench-entities: $(BENCH_STAMP)
	$(BIN)/python -m bench.entities --json build/bench-entities.json

# The suite against peers and this machine's limits: make bench rewrites the generated
# section of docs/benchmarks.md and docs/benchmarks.json (at most 30 minutes); make
# bench-quick is the smoke run (under 3 minutes) that CI runs, its report under build/.
bench: $(BENCH_STAMP)
	$(BIN)/python -m bench.suite --markdown docs/benchmarks.md --json docs/benchmarks.json

bench-quick: $(BENCH_STAMP)
	$(BIN)/python -m bench.suite --quick --markdown build/bench-quick/benchmarks.md --json build/bench-quick/benchmarks.json
	mkdir -p build/bench-quick && $(BIN)/python -m bench.security --quick --json build/bench-quick/security.json
	$(BIN)/python -m bench.batch_cost --quick --json build/bench-quick/batch-cost.json
	$(BIN)/python -m bench.request_cost --quick --json build/bench-quick/request-cost.json

# The broker's CPU per small request (Metadata, one-record Produce), pipelined on one
# connection; --platform LABEL=PATH compares revisions in alternating rounds.
bench-request-cost: $(STAMP)
	$(BIN)/python -m bench.request_cost

bench-replay: $(STAMP)
	$(BIN)/python -m bench.replay --phases --rebuild-repeat 3

bench-replay-kafka: $(STAMP)
	$(BIN)/python -m bench.replay_kafka

bench-collector: $(STAMP)
	$(BIN)/python -m bench.collector

# The deterministic simulations with many more seeds than CI runs (200, 50 and 200):
# the Raft core alone, the quorum's trio shell, and the whole cluster (about 1.5 s a seed).
sim: $(STAMP)
	EVENTPLATFORM_SIM_SEEDS=10000 EVENTPLATFORM_TRIO_SIM_SEEDS=2000 \
		EVENTPLATFORM_CLUSTER_SIM_SEEDS=10000 \
		$(BIN)/python -m pytest -q -p no:cacheprovider -n auto tests/sim

# Fault injection on a real 3-node cluster (tests/support/fault_run.py): FAULT_SEEDS seeds of
# FAULT_ROUNDS nemesis rounds each (the default 300 took 44 minutes on 2 cores); it prints one
# summary line and fails on any anomaly. CI runs a 6-round slice (tests/cluster/test_faults.py).
FAULT_SEEDS ?= 6
FAULT_ROUNDS ?= 50
faults: $(STAMP)
	mkdir -p build
	$(BIN)/python tests/support/fault_run.py --seeds $(FAULT_SEEDS) --rounds $(FAULT_ROUNDS) \
		--quiet --json build/faults.json

# The entity race at full size (tests/cluster/test_entity_race.py): 16 processes send 2,000
# bank commands each to 50 accounts, on one broker and on a 3-node cluster whose leader of
# the accounts' partition is killed every few seconds; then the broker's entity rule
# against its sequential model for 1,000 examples. CI runs a small slice of both.
# Exactly-once projections under SIGKILL at full size (the suite runs a slice: 80,000
# events, 8 kills).
exactly-once: $(STAMP)
	EXACTLY_ONCE_EVENTS=200000 EXACTLY_ONCE_KILLS=20 $(BIN)/python -m pytest -s \
		-p no:cacheprovider tests/projections/test_projection_exactly_once.py

# Spark's rebuilds, rebuilds on top and backfills against the streaming runner, for 30
# generated streams of events and corrections (the suite runs 2, and two written out).
replay-equivalence: $(STAMP)
	REPLAY_EQUIVALENCE_EXAMPLES=30 PYSPARK_PYTHON=$(abspath $(BIN)/python) \
		$(BIN)/python -m pytest -p no:cacheprovider tests/spark_projections/test_replay_equivalence.py

entity-race: $(STAMP)
	ENTITY_RACE_PROCESSES=16 ENTITY_RACE_COMMANDS=2000 ENTITY_RACE_ACCOUNTS=50 \
		$(BIN)/python -m pytest -s -p no:cacheprovider tests/cluster/test_entity_race.py
	ENTITY_RULE_EXAMPLES=1000 $(BIN)/python -m pytest -p no:cacheprovider \
		tests/log/replica/test_entity_versions_state_machine.py

bench-log-tail: $(STAMP)
	$(BIN)/python -m bench.log_tail

bench-replication: $(STAMP)
	$(BIN)/python -m bench.replication

# Produce, consume and connect on one broker's PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL
# listeners, in turns (about a minute; make bench-quick runs its few-second smoke run).
bench-security: $(STAMP)
	mkdir -p build && $(BIN)/python -m bench.security --json build/bench-security.json

# librdkafka's own test suite against our broker (docs/compatibility.md). The source is
# unpacked from ../shared/conformance/ into build/compat/ (ignored by git) and built there
# whenever the archive is newer than the last build: about 5 minutes on 2 cores.
# make compat runs tests 0001-0150 on one broker and on a 3-node cluster (about an hour);
# make compat-quick, which CI runs, runs the quick list on one broker (a few minutes).
# Another checkout layout names the archive with COMPAT_TARBALL=... on the command line.
COMPAT_TARBALL ?= ../shared/conformance/librdkafka-4c3b017c3.tar.gz
COMPAT_DIR := build/compat
COMPAT_SRC := $(COMPAT_DIR)/librdkafka
COMPAT_TEST_RUNNER := $(COMPAT_SRC)/tests/test-runner
COMPAT_STAMP := $(COMPAT_DIR)/.built

compat-build: $(COMPAT_STAMP)

$(COMPAT_STAMP): $(COMPAT_TARBALL)
	rm -rf $(COMPAT_SRC) && mkdir -p $(COMPAT_SRC)
	tar -xzf $(COMPAT_TARBALL) -C $(COMPAT_SRC) --strip-components=1
	cd $(COMPAT_SRC) && ./configure --disable-debug-symbols >$(CURDIR)/$(COMPAT_DIR)/configure.log
	nice -n 10 $(MAKE) -C $(COMPAT_SRC) -j2 libs >$(COMPAT_DIR)/build.log
	nice -n 10 $(MAKE) -C $(COMPAT_SRC)/tests -j2 test-runner >>$(COMPAT_DIR)/build.log
	touch $(COMPAT_STAMP)

compat: $(STAMP) $(COMPAT_STAMP)
	$(BIN)/python -m tests.compat.run --test-runner $(COMPAT_TEST_RUNNER) --setup single
	$(BIN)/python -m tests.compat.run --test-runner $(COMPAT_TEST_RUNNER) --setup cluster

# The admin, SSL, SASL credential and re-authentication tests over SASL_SSL with ACLs on.
compat-secured: $(STAMP) $(COMPAT_STAMP)
	$(BIN)/python -m tests.compat.run --test-runner $(COMPAT_TEST_RUNNER) --setup secured

compat-quick: $(STAMP) $(COMPAT_STAMP)
	$(BIN)/python -m tests.compat.run --test-runner $(COMPAT_TEST_RUNNER) --setup single --quick

clean:
	rm -rf $(VENV) .eventplatform .pytest_cache .mypy_cache .ruff_cache .hypothesis
