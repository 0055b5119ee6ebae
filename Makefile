# Two entry points for a fresh machine: `make serve` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
# command:apt package — installed when the command is missing (java runs Spark and Apache
# Kafka; javac runs the single-file Java test programs; mvn resolves Kafka from Maven Central;
# etcd keeps the cluster metadata of cluster mode, etcdctl checks its health in tests;
# chromium is the browser the console's tests drive through Playwright).
# PostgreSQL (the dual-write tests' database) is probed separately: Debian keeps initdb off PATH.
APT_PACKAGES := kcat:kcat java:openjdk-17-jre-headless javac:openjdk-17-jdk-headless mvn:maven \
	etcd:etcd-server etcdctl:etcd-client chromium:chromium

.PHONY: serve cluster-up setup setup-dev system-deps compiler-deps reference-deps go-deps test lint typecheck unit bench bench-cluster soak fuzz fuzz-decoder clean

serve: setup
	$(BIN)/lockgate serve $(ARGS)

# a development cluster: a 3-member etcd and 3 brokers on 127.0.0.1 (etcd from system-deps)
cluster-up: setup system-deps
	$(BIN)/lockgate cluster up $(ARGS)

setup: $(BIN)/.installed

# The compiled fast paths (src/lockgate/client/_fastpath.c for the producer,
# src/lockgate/client/_columns.c for the Spark source's Fetch decoding,
# src/lockgate/protocol/_records.c for decoding a batch's records; built by pip through
# setup.py): a change to them or to the build reinstalls, which compiles them again.
FASTPATH_SOURCES := setup.py src/lockgate/client/_fastpath.c src/lockgate/client/_columns.c \
	src/lockgate/protocol/_records.c
# An editable install compiles no bytecode: without this, the broker's first start (and every
# start where PYTHONDONTWRITEBYTECODE is set) compiles ~200 modules, about a second of CPU.
COMPILE = $(BIN)/python -m compileall -q src/lockgate >/dev/null

$(BIN)/.installed: pyproject.toml $(FASTPATH_SOURCES) | compiler-deps
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	$(COMPILE)
	touch $@

setup-dev: $(BIN)/.installed-dev

$(BIN)/.installed-dev: pyproject.toml $(FASTPATH_SOURCES) | compiler-deps
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark,postgres,console]'
	$(COMPILE)
	touch $@ $(BIN)/.installed

# gcc and Python's headers for the compiled fast path: without them the install still works
# (pure Python), but CI's test of the compiled path fails. Debian's python3 keeps its headers
# in python3-dev; a Python built from source (pyenv) ships them.
compiler-deps:
	@missing=""; command -v gcc >/dev/null || missing="gcc"; \
	$(PYTHON) -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
		|| missing="$$missing python3-dev"; \
	if [ -n "$$missing" ]; then \
		echo "installing system packages:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

system-deps: compiler-deps
	@missing=""; for p in $(APT_PACKAGES); do command -v $${p%%:*} >/dev/null || missing="$$missing $${p#*:}"; done; \
	command -v initdb >/dev/null || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
		echo "installing system packages:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

# ruff, then the layers of the house (import-linter's contracts in pyproject.toml)
lint: setup-dev
	$(BIN)/ruff check .
	$(BIN)/lint-imports

typecheck: setup-dev
	$(BIN)/mypy

# Two workers: most tests wait on sockets and child processes, so the 2-core machine halves
# the wall time; --dist loadfile keeps each module (and its module-scoped broker) on one worker,
# and the modules sharing the Spark session and the reference Kafka brokers on one worker too
# (tests/support/scheduling.py: those start once per run). --no-loadscope-reorder hands the
# modules out in collection order, the slowest directories first (tests/conftest.py), instead
# of by test count, which left the longest modules (single tests of minutes) for the end.
PYTEST_WORKERS ?= 2

# The reference peers (Apache Kafka's broker and tools, Spark's Kafka connector) from Maven
# Central into .cache/: the jars stay in the project's own Maven cache, the classpaths are
# written for the test fixtures. Of the connector's dependencies only its own jars are listed:
# PySpark ships Spark, Scala and Hadoop.
REFERENCE_CLASSPATH := .cache/reference/kafka.classpath
SPARK_KAFKA_CLASSPATH := .cache/reference/spark-kafka.classpath
SPARK_KAFKA_JARS := spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2
# S3Proxy, the S3-compatible object store of the tiered-storage tests (tests/support/object_store.py)
S3PROXY_CLASSPATH := .cache/reference/s3proxy.classpath
reference-deps: $(REFERENCE_CLASSPATH) $(SPARK_KAFKA_CLASSPATH) $(S3PROXY_CLASSPATH)

$(REFERENCE_CLASSPATH): tests/reference/pom.xml | system-deps
	mkdir -p $(dir $@)
	mvn -q -B -f tests/reference/pom.xml -Dmaven.repo.local=$(CURDIR)/.cache/m2 \
		dependency:build-classpath -Dmdep.outputFile=$(CURDIR)/$@.tmp
	mv $@.tmp $@

$(SPARK_KAFKA_CLASSPATH): tests/reference/spark-kafka/pom.xml | system-deps
	mkdir -p $(dir $@)
	mvn -q -B -f tests/reference/spark-kafka/pom.xml -Dmaven.repo.local=$(CURDIR)/.cache/m2 \
		dependency:build-classpath -DincludeArtifactIds=$(SPARK_KAFKA_JARS) \
		-Dmdep.outputFile=$(CURDIR)/$@.tmp
	mv $@.tmp $@

$(S3PROXY_CLASSPATH): tests/reference/s3proxy/pom.xml | system-deps
	mkdir -p $(dir $@)
	mvn -q -B -f tests/reference/s3proxy/pom.xml -Dmaven.repo.local=$(CURDIR)/.cache/m2 \
		dependency:build-classpath -Dmdep.outputFile=$(CURDIR)/$@.tmp
	mv $@.tmp $@

# franz-go (Go) as a tested client: tests/go/franzcheck, built with the machine's Go toolchain
# (1.26 or newer, preinstalled; not fetched: GOTOOLCHAIN=local) against the module versions
# pinned in its go.mod and go.sum, which `go build` downloads into Go's own module cache.
GO ?= $(or $(shell command -v go 2>/dev/null),$(wildcard /usr/local/go/bin/go))
FRANZCHECK := .cache/go/franzcheck
FRANZCHECK_SOURCES := $(wildcard tests/go/franzcheck/*.go) tests/go/franzcheck/go.mod tests/go/franzcheck/go.sum
go-deps: $(FRANZCHECK)

$(FRANZCHECK): $(FRANZCHECK_SOURCES)
	@if [ -z "$(GO)" ]; then \
		echo "Go is not installed: the franz-go tests need the go command (Go 1.26 or newer) on PATH" >&2; \
		exit 1; \
	fi
	mkdir -p $(dir $@)
	cd tests/go/franzcheck && GOFLAGS=-mod=readonly GOTOOLCHAIN=local $(GO) build -o $(CURDIR)/$@.tmp .
	mv $@.tmp $@

# --tb=native: formatting a failure pytest's way parses the test's source, and CPython 3.11.7
# once crashed a worker there (SystemError: AST constructor recursion depth mismatch), hiding
# which test had failed. --durations: the slowest tests, to keep the suite well under 20 minutes
test: setup-dev system-deps reference-deps go-deps lint typecheck
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --tb=native --durations=20 $(PYTEST_ARGS)

# The long fault-injection run (tests/faults): `make soak SEEDS=200 [DURATION=20] [LIFECYCLE=1]
# [TIERED=1]`; LIFECYCLE=1 adds small segments, retention and more broker kills; TIERED=1 copies
# most of the history to an S3Proxy server and reads it back (needs `make reference-deps`);
# CLUSTER=1 runs the seeds on a 3-broker cluster with its own nemesis (tests/faults/
# cluster_run.py; LIFECYCLE and TIERED are single-node).
SEEDS ?= 200
DURATION ?= 20
soak: setup-dev system-deps
	$(BIN)/python -m tests.faults.$(if $(CLUSTER),cluster_run,run) --seeds 1-$(SEEDS) --duration $(DURATION) $(if $(CLUSTER),,$(if $(LIFECYCLE),--lifecycle) $(if $(TIERED),--tiered))

# Protocol fuzzing against a live broker: `make fuzz [FRAMES=100000]`.
FRAMES ?= 100000
fuzz: setup-dev
	$(BIN)/python -m tests.faults.fuzz --frames $(FRAMES)

# Coverage-guided fuzzing of the request decoder (atheris): `make fuzz-decoder [RUNS=1000000]`.
RUNS ?= 1000000
fuzz-decoder: setup-dev
	$(BIN)/python -m tests.faults.fuzz_decoder -runs=$(RUNS) -max_len=4096

bench: setup-dev
	$(BIN)/python -m bench.throughput $(ARGS)

bench-cluster: setup-dev system-deps
	$(BIN)/python -m bench.cluster $(ARGS)

clean:
	rm -rf $(VENV) lockgate-data .pytest_cache .mypy_cache .ruff_cache build src/lockgate/client/*.so
