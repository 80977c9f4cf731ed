# flowbox: `make demo` runs an example workflow offline; `make test` runs every test.
# Everything builds with the release profile: one target directory, one wasmtime build.

CARGO ?= cargo
GUEST := components/flowbox_guest.wasm.gz
GUEST_SOURCES := $(shell find guest-python -name '*.py' -not -path '*/tests/*') \
	wit/flowbox.wit host/flowbox/contract/script.json guest-python/build.sh

.PHONY: all guest build demo test test-guest lint doc out-of-tree bench fuzz python test-python
.PHONY: test-browser bench-view bench-history

all: build

guest: $(GUEST)

$(GUEST): $(GUEST_SOURCES)
	guest-python/build.sh

build: guest
	$(CARGO) build --release --locked

demo: build
	target/release/flowbox run examples/review.py --backend scripted:examples/review.backend.json

# What `make test` runs (the crates' doc examples included) caches the compiled guest in the
# workspace, not in the user's cache directory.
test: export FLOWBOX_CACHE_DIR ?= $(CURDIR)/target/flowbox-cache
test: guest test-guest lint doc
	$(CARGO) test --release --locked --workspace
	tests/out-of-tree/run.sh

test-guest:
	guest-python/test.sh

# The Python package (python/, docs/python.md): `make python` builds its wheel into
# target/wheels with the pinned maturin; `make test-python` also runs its tests against the
# installed wheel.
python: guest
	python/test.sh build

test: test-python
test-python: guest
	python/test.sh

lint: guest
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --locked --workspace --all-targets -- -D warnings

# The API docs, with every warning (a broken link, a missing doc) an error.
doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --release --locked --no-deps --workspace --all-features

# The packaged crates built and run from a project outside the workspace.
out-of-tree: guest
	tests/out-of-tree/run.sh

bench: guest
	$(CARGO) bench --locked -p flowbox --features otlp --bench runtime

# The request-decoding fuzz properties run briefly in `make test`; this runs them for longer.
fuzz: guest
	PROPTEST_CASES=$${PROPTEST_CASES:-100000} $(CARGO) test --release --locked -p flowbox fuzz

# The web view of `flowbox serve` in a real headless Chromium: the system's package and
# playwright-core, installed by tests/browser/setup.sh; screenshots in target/browser/out.
test: test-browser
bench: bench-view bench-history

test-browser: build
	tests/browser/setup.sh
	node tests/browser/view.mjs target/release/flowbox target/browser/out
	node tests/browser/mcp-app.mjs target/release/flowbox target/browser/out

# flowbox from Python against pydantic-monty and pyeryx: target/bench/python.json.
.PHONY: bench-python
bench: bench-python
bench-python: guest
	python/bench/bench.sh

# What journaling a run's events adds per leaf: target/bench/history.json.
bench-history: guest
	$(CARGO) bench --locked -p flowbox --bench history

# The run page of a 1000-leaf run, rendered in headless Chromium: prints its time as JSON.
bench-view: build
	tests/browser/setup.sh
	node tests/browser/view.mjs target/release/flowbox target/browser/out --bench

# flowbox on Restate (host/cli/tests/all/restate.rs): the pinned server from the npm registry and
# HAProxy from the system packages (the load balancer in front of two leaf workers), both
# installed once into places the tests look in; nothing is downloaded at test time.
RESTATE_DIR := target/restate
RESTATE_SERVER := $(RESTATE_DIR)/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server

.PHONY: restate-setup bench-restate

test: restate-setup

restate-setup: $(RESTATE_SERVER)
	@command -v haproxy >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null; }

$(RESTATE_SERVER):
	mkdir -p $(RESTATE_DIR)
	cd $(RESTATE_DIR) && npm install --no-save --no-audit --no-fund --loglevel=error @restatedev/restate-server@1.7.12
	test -x $@ && touch $@

# flowbox on Restate against the local engine (see docs/benchmarks.md).
bench-restate: guest restate-setup
	$(CARGO) bench --locked -p flowbox-restate --bench restate

# The CLI tests' Python peers, each in its own virtualenv from its pinned requirements
# (host/cli/tests/NAME/requirements.txt into target/NAME-venv): the official Python MCP SDK,
# the client of the `flowbox mcp` tests (host/cli/tests/all/mcp.rs); and an OTLP/HTTP trace
# receiver decoding with the pinned opentelemetry-proto, the collector of the trace tests
# (host/cli/tests/all/otlp.rs).
.PHONY: mcp-client otlp-receiver
test: mcp-client otlp-receiver

mcp-client: target/mcp-venv/installed
otlp-receiver: target/otlp-venv/installed

target/%-venv/installed: host/cli/tests/%/requirements.txt
	python3 -m venv target/$*-venv
	target/$*-venv/bin/pip install --quiet --disable-pip-version-check -r $<
	touch $@

# `make bench` also measures what `flowbox mcp` over stdio adds to the library's runs
# (target/bench/mcp.json).
.PHONY: bench-mcp
bench: bench-mcp

bench-mcp: guest
	$(CARGO) bench --locked -p flowbox-cli --bench mcp

# A whole `flowbox run` process of `return 1`, with and without the journal
# (target/bench/process.json).
.PHONY: bench-process
bench: bench-process

bench-process: guest
	$(CARGO) bench --locked -p flowbox-cli --bench process
