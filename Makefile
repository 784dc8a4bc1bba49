# IMGateway: the two commands a fresh Debian machine needs are `make run` and `make test`.
# Both install what is missing (apt-get), then build.

SHELL := /bin/bash
SWIFT ?= swift
APT_PACKAGES := libmosquitto-dev libsqlite3-dev mosquitto mosquitto-clients zlib1g-dev libssl-dev pkg-config openssl curl binutils
# imbench's RocksDB measurement (`imbench rocksdb`, the CRocksDB module) links librocksdb.
APT_PACKAGES += librocksdb-dev
# Seconds of decoder fuzzing in `make test` (0 skips it).
FUZZ_SECONDS ?= 30
# The test watchdog (scripts/test-watchdog) stops `swift test` when no test has started or ended
# for TEST_STALL_SECONDS, or the run takes longer than TEST_LIMIT_SECONDS: it prints the tests
# still running, the processes and the test process's threads, kills them all and fails
# (exit 124) instead of hanging.
TEST_STALL_SECONDS ?= 300
TEST_LIMIT_SECONDS ?= 3600
WATCHDOG = python3 scripts/test-watchdog --stall $(TEST_STALL_SECONDS) --limit $(TEST_LIMIT_SECONDS) --
# Where `make run` keeps the embedded broker's data, and its port.
RUN_DIR ?= run
BROKER_PORT ?= 1883

.PHONY: all deps test-deps build release test unit-test integration-test run clean help bench openapi chaos release-check

all: build

help:
	@echo "make run    install what is missing, build, start the daemon (embedded broker)"
	@echo "make test   install what is missing, build, run every test (+ $(FUZZ_SECONDS) s of fuzzing);"
	@echo "            a test run stalled for TEST_STALL_SECONDS=$(TEST_STALL_SECONDS) or longer than TEST_LIMIT_SECONDS=$(TEST_LIMIT_SECONDS) is stopped"
	@echo "make fuzz   fuzz the IMWire frame decoder (FUZZ_SECONDS=$(FUZZ_SECONDS))"
	@echo "make chaos  the chaos run: CHAOS_SECONDS=$(CHAOS_SECONDS) of crashes, cuts and stalls, seed CHAOS_SEED=$(CHAOS_SEED) (docs/RELIABILITY.md)"

## Install the Debian packages we build and test against, if any is missing.
deps:
	@command -v $(SWIFT) >/dev/null || { echo "error: no Swift toolchain on PATH (Swift 6.1 or newer, https://www.swift.org/install/linux/)"; exit 1; }
	@missing=""; \
	for package in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$package 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$package"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends $$missing; \
	fi

## The tests also need python3 (the test watchdog): Debian's, if there is none on PATH;
## ejabberd (the second broker: the tests run their own nodes as the test's user);
## PostgreSQL (the archive's tests run their own servers, as the postgres user under root); and
## schemathesis (the server API's conformance run, APIConformanceTests) from PyPI, in a
## virtual environment of its own under .build.
SCHEMATHESIS_VERSION := 4.32.5
SCHEMATHESIS_VENV := .build/schemathesis-venv
test-deps: deps
	@command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' 2>/dev/null || { \
	  echo "installing: python3 python3-venv"; \
	  if [ "$$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends python3 python3-venv; \
	}
	@dpkg-query -W -f='$${Status}' ejabberd 2>/dev/null | grep -q "install ok installed" || { \
	  echo "installing: ejabberd (the second MQTT broker of the integration tests, which start their own nodes; the system service is left stopped)"; \
	  if [ "$$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi; \
	  $$sudo apt-get update -qq && $$sudo env RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ejabberd; \
	  $$sudo systemctl disable --now ejabberd >/dev/null 2>&1 || true; \
	}
	@dpkg-query -W -f='$${Status}' postgresql 2>/dev/null | grep -q "install ok installed" || { \
	  echo "installing: postgresql (the PostgreSQL archive's integration tests, which start their own servers; the system cluster is left stopped)"; \
	  if [ "$$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi; \
	  $$sudo apt-get update -qq && $$sudo env RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql; \
	  $$sudo systemctl disable --now postgresql >/dev/null 2>&1 || true; \
	}
	@$(SCHEMATHESIS_VENV)/bin/st --version 2>/dev/null | grep -q '$(SCHEMATHESIS_VERSION)' || { \
	  echo "installing: schemathesis $(SCHEMATHESIS_VERSION) (pip, in $(SCHEMATHESIS_VENV))"; \
	  python3 -m venv $(SCHEMATHESIS_VENV) && $(SCHEMATHESIS_VENV)/bin/python -m pip install -q --disable-pip-version-check schemathesis==$(SCHEMATHESIS_VERSION); \
	}
	@missing=""; \
	for package in chromium chromium-driver; do \
	  dpkg-query -W -f='$${Status}' $$package 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$package"; \
	done; \
	command -v node >/dev/null || missing="$$missing nodejs"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing (the browser tests drive headless Chromium through chromedriver; node runs imclient.js's unit tests)"; \
	  if [ "$$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@.build/web-venv/bin/python -c 'import importlib.metadata as m; assert m.version("selenium") == "4.51.0" and m.version("websockets") == "17.4"' 2>/dev/null || { \
	  echo "installing: selenium 4.51.0 and websockets 17.4 (pip, in .build/web-venv: Tests/web's browser and WebSocket conformance tests)"; \
	  python3 -m venv .build/web-venv && .build/web-venv/bin/python -m pip install -q --disable-pip-version-check selenium==4.51.0 websockets==17.4; \
	}

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release

# Tests that load both cores: run alone (see test).
STRESS_TESTS = 'OneUserFuzzTests|ChatRateLimitIntegrationTests/flooder|CatchUpOnceTests'
# Hundreds of senders whose connections end at once, each chat timed to its recipient (1 s):
# alone, since beside the floods the test process's own threads, not the gateway, set its times.
LATENCY_TESTS = 'StoredChatDeliveryTests'
# make run's gateway with headless Chromium, the examples and the WebSocket conformance run:
# alone (Chromium and four gateways at once starve the ejabberd nodes of the other tests).
WEB_TESTS = 'WebTests'
# The chaos run's minute (imbench chaos, a fixed seed): alone too.
CHAOS_TESTS = 'ChaosRunTests'
# Run once more with libmosquitto's internals off (MOSQUITTO_SWIFT_INTERNALS=off, which the
# imgw processes the tests start inherit): the Mosquitto library's tests and the gateway's core
# integration tests.
INTERNALS_OFF_TESTS = '^MosquittoTests\.|MosquittoClientTests|MosquittoCallbackTests|MosquittoWriteCoalescingTests|AckThroughTests|ReceiveMaximumTests|GatewayTests|BrokerRestartTests|SessionEndingTests|DurabilityTests|DescriptorHygieneTests|LibmosquittoInternalsTests|WindowedPublishTests'

## Every test: the test watchdog's own tests (silent unless they fail), a bounded fuzzing run
## of the frame decoder, then unit tests, the protocol's test vectors, and integration tests
## against real mosquitto brokers the tests start on free ports, under the test watchdog, and
## last the server API's conformance run (schemathesis against docs/openapi.yaml).
test: test-deps
	@out=$$(python3 -B -m unittest discover -s scripts -p 'test_*.py' 2>&1) || { \
	  printf '%s\n' "$$out"; echo "error: the test watchdog's own tests failed (scripts/test_watchdog.py)"; exit 1; }
	@if [ "$(FUZZ_SECONDS)" != "0" ]; then $(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(FUZZ_SECONDS); fi
	@# The JavaScript client's and the web pages' unit tests (PROTOCOL.md's vectors among them).
	node --test Tests/js/
	@python3 Tests/web/imwire.py --self-test >/dev/null || { python3 Tests/web/imwire.py --self-test; exit 1; }
	$(SWIFT) build --build-tests
	@# The server API's schemathesis run, the floods (hundreds of connections of one user,
	@# a device writing chat as fast as it can, 600 logins whose connections are reset at once)
	@# and the chaos run's minute keep both cores busy for a while: on their own, after the rest,
	@# so that they do not starve the timing of the others (nor the others their one-second
	@# bounds).
	$(WATCHDOG) $(SWIFT) test --skip-build --skip APIConformanceTests --skip $(STRESS_TESTS) --skip $(LATENCY_TESTS) --skip $(CHAOS_TESTS) --skip $(WEB_TESTS)
	$(WATCHDOG) $(SWIFT) test --skip-build --filter $(WEB_TESTS)
	$(WATCHDOG) $(SWIFT) test --skip-build --filter $(STRESS_TESTS)
	$(WATCHDOG) $(SWIFT) test --skip-build --filter $(LATENCY_TESTS)
	$(WATCHDOG) $(SWIFT) test --skip-build --filter $(CHAOS_TESTS)
	MOSQUITTO_SWIFT_INTERNALS=off $(WATCHDOG) $(SWIFT) test --skip-build --filter $(INTERNALS_OFF_TESTS)
	$(WATCHDOG) $(SWIFT) test --skip-build --filter APIConformanceTests
	$(MAKE) --no-print-directory release-check

## Release builds of imgw and imcli, checked for async code that reads a thread-local through
## an address computed before a suspension (scripts/tls-across-awaits: what made imgw die with
## "Call to unlock Mutex on a thread which hasn't acquired the lock"; docs/RELIABILITY.md).
release-check: deps
	$(SWIFT) build -c release --product imgw
	$(SWIFT) build -c release --product imcli
	BIN=$$($(SWIFT) build -c release --show-bin-path); python3 scripts/tls-across-awaits $$BIN/imgw $$BIN/imcli

unit-test: test-deps
	$(WATCHDOG) $(SWIFT) test --filter '^(MosquittoTests|IMWireTests|IMGatewayTests|IMClientTests|FaultProxyTests|AsyncToolkitTests|IMArchiveTests|imbenchTests)\.'

integration-test: test-deps
	$(WATCHDOG) $(SWIFT) test --filter IntegrationTests

## Regenerates the server API's Swift code (Sources/IMGatewayAPI/Generated, committed) from
## docs/openapi.yaml with swift-openapi-generator (a package of its own in tools/openapi,
## built on first use), and records the document's digest, which a unit test compares.
openapi:
	$(SWIFT) run --package-path tools/openapi -c release swift-openapi-generator generate docs/openapi.yaml \
	  --config Sources/IMGatewayAPI/openapi-generator-config.yaml --output-directory Sources/IMGatewayAPI/Generated
	@printf '// Generated by make openapi: the SHA-256 of docs/openapi.yaml this code was generated from.\npublic enum OpenAPIDocument {\n    public static let sha256 = "%s"\n}\n' \
	  "$$(sha256sum docs/openapi.yaml | cut -d' ' -f1)" > Sources/IMGatewayAPI/Generated/OpenAPIDocument.swift

## Benchmarks, release build (a few minutes; docs/PERFORMANCE.md explains the figures).
bench: deps
	$(SWIFT) build -c release --product imgw
	$(SWIFT) build -c release --product imbench
	BIN=$$($(SWIFT) build -c release --show-bin-path); \
	  $$BIN/imbench wire && \
	  $$BIN/imbench chat --seconds 5 --rounds 6 && \
	  $$BIN/imbench mqtt --seconds 4 --rounds 3 && \
	  $$BIN/imbench chat --seconds 10 --rate 5000 && \
	  $$BIN/imbench connect --users 4500 && \
	  $$BIN/imbench weak --seconds 60 --seed 7 && \
	  $$BIN/imbench weak --seconds 60 --seed 7 --outage-mode blackhole

## The chaos run (docs/RELIABILITY.md): CHAOS_SECONDS of chat under kills, stops, cuts and
## stalls of two gateways, the broker, PostgreSQL and the links, release build; the report on
## stdout, its JSON in $(RUN_DIR)/chaos.json; exit 1 on anything lost, duplicated, unexpected,
## reordered or unanswered, or a device slower than 5 s to come back.
CHAOS_SECONDS ?= 600
CHAOS_SEED ?= 20261127
chaos: test-deps
	$(SWIFT) build -c release --product imgw
	$(SWIFT) build -c release --product imbench
	@mkdir -p $(RUN_DIR)
	BIN=$$($(SWIFT) build -c release --show-bin-path); python3 scripts/tls-across-awaits $$BIN/imgw
	BIN=$$($(SWIFT) build -c release --show-bin-path); \
	  $$BIN/imbench chaos --seconds $(CHAOS_SECONDS) --seed $(CHAOS_SEED) --json $(RUN_DIR)/chaos.json

## Start the daemon: imgw with its embedded broker (TLV clients on 127.0.0.1:6969, browsers on
## 127.0.0.1:$(WS_PORT) with the web chat page, the server API and its operator console on
## 127.0.0.1:$(API_PORT), the broker on 127.0.0.1:$(BROKER_PORT), its data and the message archive
## under $(RUN_DIR)/). The first start makes a random JWT secret and API key ($(RUN_DIR)/jwt.secret,
## $(RUN_DIR)/api.key, mode 0600), kept for the next; imcli finds $(RUN_DIR)/imgw.yaml by itself.
## Ctrl-C stops both.
WS_PORT ?= 6980
API_PORT ?= 9470
run: build
	@mkdir -p $(RUN_DIR)
	@if (exec 3<>/dev/tcp/127.0.0.1/$(BROKER_PORT)) 2>/dev/null; then \
	  echo "error: 127.0.0.1:$(BROKER_PORT) is already in use (a system mosquitto? 'systemctl stop mosquitto', or make run BROKER_PORT=1884)"; exit 1; fi
	@RUN_DIR=$(RUN_DIR) WS_PORT=$(WS_PORT) API_PORT=$(API_PORT) BROKER_PORT=$(BROKER_PORT) scripts/run-config
	@echo "Starting imgw ($(RUN_DIR)/imgw.yaml; its secret and API key are in $(RUN_DIR)/, mode 0600):"
	@echo "  TLV clients      127.0.0.1:6969   (imcli reads $(RUN_DIR)/imgw.yaml: .build/debug/imcli --help)"
	@echo "  web chat         http://127.0.0.1:$(WS_PORT)/"
	@echo "  console          http://127.0.0.1:$(API_PORT)/console   (API key: $$(cat $(RUN_DIR)/api.key))"
	@echo "  metrics          http://127.0.0.1:9469/metrics"
	@echo "  embedded broker  127.0.0.1:$(BROKER_PORT). Watch it (it refuses anonymous clients; the observer account is read-only):"
	@echo "    mosquitto_sub -h 127.0.0.1 -p $(BROKER_PORT) -u imgw-observer -P \"\$$(cat $(abspath $(RUN_DIR))/broker/observer.password)\" -i imgw-observer -v -t 'im/#'"
	exec $$($(SWIFT) build --show-bin-path)/imgw serve --config $(RUN_DIR)/imgw.yaml

include Fuzz/fuzz.mk

clean:
	$(SWIFT) package clean
	rm -rf $(RUN_DIR) fuzz .build-fuzz
