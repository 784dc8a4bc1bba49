# Fuzzing the IMWire frame decoder with libFuzzer.
#
#   make -f Fuzz/fuzz.mk fuzz FUZZ_SECONDS=10     (or `include Fuzz/fuzz.mk` from the Makefile)
#
# `fuzz` builds fuzz/imwire-fuzz and runs it for FUZZ_SECONDS (default 30). It exits non-zero
# when libFuzzer finds a crash, a failed invariant (Fuzz/IMWireFuzz/IMWireFuzz.swift), a timeout
# or an out-of-memory; the input that caused it is left in fuzz/artifacts/. New coverage-increasing
# inputs accumulate in fuzz/corpus/ (gitignored), seeded with every test vector of
# Tests/IMWireTests/Fixtures/vectors.json.
#
# How the binary is built, and why this way:
#   1. `swift build -c release --target IMWire` in its own scratch path (.build-fuzz) builds the
#      dependencies (NIOCore and what it needs) as ordinary object files. They are not
#      instrumented: coverage of swift-nio's internals would only dilute the guidance.
#   2. Those objects go into one static archive, linked with --whole-archive so that Swift
#      metadata (protocol conformance records) in objects nobody references is kept.
#   3. `swiftc -sanitize=fuzzer -parse-as-library` compiles the sources of Sources/IMWire together
#      with the fuzz entry point into one module: IMWire's code is instrumented, the entry point
#      sees its internal API, and libFuzzer supplies `main` (hence -parse-as-library).
#   The module maps of the C modules NIOCore imports are the ones SwiftPM generated in the scratch
#   path or ships in the checkouts' include/ directories, passed as -fmodule-map-file.
#   The run sets SWIFT_BACKTRACE=enable=no: otherwise the Swift runtime's backtracer takes the
#   crash signal of a failed precondition, and libFuzzer neither reports it nor saves the input.
#   Things that do not work: `swiftc -sanitize=fuzzer-no-link` (not a swiftc value); `swift build
#   --sanitize=fuzzer` needs an executable target in Package.swift and instruments everything.

FUZZ_SECONDS ?= 30
FUZZ_DIR ?= fuzz
FUZZ_SCRATCH ?= .build-fuzz
FUZZ_SWIFT ?= swift
FUZZ_SWIFTC ?= swiftc
FUZZ_FLAGS ?= -timeout=10 -rss_limit_mb=2048 -max_len=65536

FUZZ_BIN := $(FUZZ_DIR)/imwire-fuzz
FUZZ_RELEASE := $(FUZZ_SCRATCH)/release
FUZZ_SOURCES := $(shell find Sources/IMWire Fuzz/IMWireFuzz -name '*.swift' | sort)
FUZZ_VECTORS := Tests/IMWireTests/Fixtures/vectors.json

.PHONY: fuzz fuzz-build fuzz-clean

fuzz: $(FUZZ_BIN)
	@mkdir -p $(FUZZ_DIR)/corpus $(FUZZ_DIR)/seed $(FUZZ_DIR)/artifacts
	@if command -v python3 >/dev/null; then \
	  python3 -c 'import json, os, sys; d = json.load(open(sys.argv[1])); \
	  [open(os.path.join(sys.argv[2], v["name"] + ".bin"), "wb").write(bytes.fromhex(v["hex"])) for v in d["vectors"] + d["malformed"]]' \
	  $(FUZZ_VECTORS) $(FUZZ_DIR)/seed; \
	else echo "fuzz: no python3, starting without the test vectors as seeds"; fi
	SWIFT_BACKTRACE=enable=no $(FUZZ_BIN) $(FUZZ_FLAGS) -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	  -artifact_prefix=$(FUZZ_DIR)/artifacts/ $(FUZZ_DIR)/corpus $(FUZZ_DIR)/seed

fuzz-build: $(FUZZ_BIN)

$(FUZZ_BIN): $(FUZZ_SOURCES) Package.swift
	@mkdir -p $(FUZZ_DIR)
	$(FUZZ_SWIFT) build -c release --scratch-path $(FUZZ_SCRATCH) --target IMWire
	rm -f $(FUZZ_DIR)/imwire-deps.a
	find $(FUZZ_RELEASE)/ -path '*/IMWire.build' -prune -o -name '*.o' -print0 | xargs -0 ar rcs $(FUZZ_DIR)/imwire-deps.a
	$(FUZZ_SWIFTC) -sanitize=fuzzer -parse-as-library -O -swift-version 6 -module-name IMWireFuzz \
	  -I $(FUZZ_RELEASE)/Modules \
	  -Xcc -fmodule-map-file=Sources/CZlib/module.modulemap \
	  $$(for m in $(FUZZ_RELEASE)/*.build/module.modulemap; do printf ' -Xcc -fmodule-map-file=%s' "$$m"; done) \
	  $$(for d in $(FUZZ_SCRATCH)/checkouts/*/Sources/*/include; do \
	      if [ -f "$$d/module.modulemap" ]; then printf ' -Xcc -fmodule-map-file=%s' "$$d/module.modulemap"; fi; \
	      printf ' -Xcc -I -Xcc %s' "$$d"; done) \
	  $(FUZZ_SOURCES) \
	  -Xlinker --whole-archive $(FUZZ_DIR)/imwire-deps.a -Xlinker --no-whole-archive -lz \
	  -o $@

fuzz-clean:
	rm -rf $(FUZZ_DIR)/imwire-fuzz $(FUZZ_DIR)/imwire-deps.a
