# streamgate developer entry points (GNU make). `make test` is what CI runs (via .ci/run).
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
VENV_PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
APT_PACKAGES := redis-server etcd-server etcd-client prometheus nats-server chromium podman runc mmdebstrap \
	nftables nginx-light
BINARIES := redis-server redis-cli redis-benchmark etcd etcdctl prometheus promtool nats-server chromium \
	podman runc mmdebstrap nft nginx
# Run apt-get as root directly, otherwise through sudo.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: help deps venv node-deps console image dist version constraints run test lint bench clean

help:
	@echo "make deps   install redis-server, etcd-server, etcd-client, prometheus, nats-server, chromium,"
	@echo "            podman, runc, mmdebstrap, nftables, nginx-light,"
	@echo "            gcc, python3-dev (apt)"
	@echo "            where missing (gcc and the headers build the C parts: see setup.py)"
	@echo "make venv   create $(VENV) and install the project with its dev extras"
	@echo "make node-deps  npm ci in client/typescript (the TypeScript client's compiler and test deps)"
	@echo "make console  build the web console's scripts into gateway/console/js (npm)"
	@echo "make image  build the gateway's container image $(IMAGE) with podman (BASE_IMAGE=, BUILD_IMAGE=)"
	@echo "make dist   the artifacts into $(DIST): server and client wheels and sdists, the npm tarball,"
	@echo "            the chart package, SHA256SUMS"
	@echo "make version V=X.Y.Z  write a new version into pyproject.toml and every copy of it"
	@echo "make constraints  regenerate constraints.txt (UPGRADE=1: move every pin to the newest allowed)"
	@echo "make run    start 'streamgate dev' (Redis Cluster + etcd + gateway + console)"
	@echo "make test   run the full test suite (unit, integration, quality)"
	@echo "make lint   mypy --strict and ruff"
	@echo "make bench  the harness: every goal next to raw Redis and NATS JetStream (BENCH_ARGS=--quick ...)"
	@echo "make clean  remove $(VENV) and caches"

deps:
	@export PATH="$$PATH:/usr/sbin:/sbin"; missing=""; \
	for bin in $(BINARIES); do command -v "$$bin" >/dev/null 2>&1 || missing="$$missing $$bin"; done; \
	packages=""; \
	if [ -n "$$missing" ]; then echo "missing:$$missing"; packages="$(APT_PACKAGES)"; fi; \
	if ! $(PYTHON) -c 'import ensurepip, venv' >/dev/null 2>&1; then packages="$$packages python3-venv"; fi; \
	command -v gcc >/dev/null 2>&1 || packages="$$packages gcc"; \
	$(PYTHON) -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(sysconfig.get_path("include") + "/Python.h"))' \
		|| packages="$$packages python3-dev"; \
	if [ -n "$$packages" ]; then \
		echo "installing:$$packages"; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -q; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$packages; \
	fi; \
	if [ -f /run/nginx.pid ]; then echo "stopping the system nginx (tests start their own)"; \
		$(SUDO) nginx -s quit || true; fi

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py constraints.txt $(wildcard */_speedups/*.c */_speedups/*.h)
	@if [ ! -x "$(VENV_PY)" ]; then \
		$(PYTHON) -m venv $(VENV) || { \
			echo "venv creation failed; installing python3-venv"; \
			rm -rf $(VENV); \
			$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -q; \
			$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv; \
			$(PYTHON) -m venv $(VENV); \
		}; \
	fi
	$(VENV_PY) -m pip install -q --upgrade pip
	# PIP_CONSTRAINT rather than -c: the isolated build's setuptools is pinned too
	PIP_CONSTRAINT=$(CURDIR)/constraints.txt $(VENV_PY) -m pip install -q -e ./client \
		-e '.[dev,spark,bench]'
	touch $@

node-deps: client/typescript/node_modules/.package-lock.json

# npm ci from the lock file: the TypeScript client's compiler and its tests' WebSocket package
client/typescript/node_modules/.package-lock.json: client/typescript/package-lock.json
	cd client/typescript && npm ci --no-audit --no-fund
	touch $@

CONSOLE_JS := gateway/console/js/console/main.js
console: $(CONSOLE_JS)

# the console's TypeScript and the client's it is built on, compiled to ES modules the gateway serves
$(CONSOLE_JS): client/typescript/node_modules/.package-lock.json client/typescript/tsconfig.console.json \
		$(wildcard client/typescript/src/*.ts client/typescript/console/*.ts)
	cd client/typescript && npm run build:console
	touch $@

# constraints.txt pins every dependency of every extra (and the client's): the venv, CI and the
# image install from it. `make constraints` keeps its pins and adds what pyproject.toml newly asks
# for; UPGRADE=1 moves every pin to the newest version the ranges allow.
# The server's streamgate-client comes from ./client (build/local.in), never from an index.
constraints: venv
	mkdir -p build && printf './client\n' > build/local.in
	$(VENV)/bin/uv pip compile --quiet --universal --python-version 3.11 --all-extras \
		--no-emit-package streamgate-client $(if $(UPGRADE),--upgrade) -o constraints.txt \
		pyproject.toml client/pyproject.toml build/local.in

# pyproject.toml's version is the one source; scripts/version.py writes every copy of it
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
version: venv
	@[ -n "$(V)" ] || { echo "usage: make version V=X.Y.Z"; exit 2; }
	$(VENV_PY) scripts/version.py set $(V)
	$(VENV_PY) helm/chart_package.py readme

# the name the chart's default values pull (image.repository, tag = the chart's appVersion)
IMAGE ?= streamgate:$(VERSION)
# OCI labels: the commit and the build time (SOURCE_DATE_EPOCH, when set, for reproducible builds)
REVISION := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
CREATED := $(shell date -u $(if $(SOURCE_DATE_EPOCH),-d @$(SOURCE_DATE_EPOCH)) +%Y-%m-%dT%H:%M:%SZ)
IMAGE_ARGS := $(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) \
	$(if $(BUILD_IMAGE),--build-arg BUILD_IMAGE=$(BUILD_IMAGE)) --build-arg VERSION=$(VERSION) \
	--build-arg REVISION=$(REVISION) --build-arg CREATED=$(CREATED)

# The dependencies' wheels are fetched here, so the image build itself needs no network.
image: venv console
	rm -rf build/wheelhouse && mkdir -p build/wheelhouse
	# the dependencies and the otel extra's (the chart's otel_enabled)
	$(VENV_PY) -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + p["optional-dependencies"]["otel"]))' \
		> build/requirements.txt
	# async-timeout: redis needs it on Pythons before 3.11.3 (Debian 12 has 3.11.2), which the host
	# may not be; ./client: the streamgate-client the server depends on, built here
	$(VENV_PY) -m pip wheel -q -w build/wheelhouse -c constraints.txt -r build/requirements.txt \
		./client setuptools "async-timeout>=4.0.3"
	podman build $(IMAGE_ARGS) -t $(IMAGE) -f Containerfile .

DIST ?= build/dist
# What is handed to users. Each wheel is built from its sdist (never from a stale build/lib*), the
# server's with the compiled parts and the built console inside; the npm tarball as the TypeScript
# client packs it (its prepack rebuilds dist/, under the lock its tests take); the chart package
# needs its README current (helm/chart_package.py readme); constraints.txt goes along, the pins
# the wheels were tested with (pip install -c).
dist: venv console node-deps
	$(VENV_PY) scripts/version.py check
	rm -rf $(DIST) && mkdir -p $(DIST)
	$(VENV_PY) -m build --no-isolation --outdir $(DIST) .
	$(VENV_PY) -m build --no-isolation --outdir $(DIST) client
	cd client/typescript && flock node_modules/.dist.lock npm pack --pack-destination $(abspath $(DIST))
	$(VENV_PY) helm/chart_package.py package --out $(DIST)
	cp constraints.txt $(DIST)/
	cd $(DIST) && sha256sum -- *.whl *.tar.gz *.tgz constraints.txt > SHA256SUMS

run: deps venv
	@if command -v npm >/dev/null 2>&1; then $(MAKE) --no-print-directory console; \
	else echo "npm not found: the gateway runs without its web console (install Node >= 20)"; fi
	$(VENV)/bin/streamgate dev

# screenshots and other files the tests leave for people to look at
export STREAMGATE_ARTIFACTS ?= $(CURDIR)/build/artifacts

# Each run is spread over xdist workers by group (tests/workers.py): most tests wait on servers more
# than they compute, so three workers pay on two cores. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 3
PARALLEL := -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

test: deps venv node-deps console
	$(VENV_PY) -m pytest $(PARALLEL)
	@echo "== the gateway tests once more on asyncio's event loop (the suite above ran on uvloop, the default)"
	STREAMGATE_EVENT_LOOP=asyncio $(VENV_PY) -m pytest -q $(PARALLEL) tests/unit/gateway \
		tests/integration/gateway
	@echo "== the unit tests once more with the compiled parts switched off (the Python references)"
	STREAMGATE_NO_EXTENSIONS=1 $(VENV_PY) -m pytest -q $(PARALLEL) tests/unit

lint: venv
	$(VENV)/bin/mypy --strict
	$(VENV)/bin/ruff check .

bench: deps venv
	@command -v wrk >/dev/null 2>&1 || $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk \
		|| echo "wrk not installed: the harness's HTTP load comes from its own aiohttp client"
	$(VENV_PY) bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build dist client/typescript/node_modules \
		client/typescript/dist gateway/console/js
	find . -name __pycache__ -type d -prune -not -path './.git/*' -exec rm -rf {} +
