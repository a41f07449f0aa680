# fairsched — entry point. The real build is CMake; this file drives it.
#   make            build everything into build/ (binaries in build/bin, libraries in build/lib)
#   make test       build and run every test through ctest (make stress: only the stress tests)
#   make demo       run the main job on the embedded default config
#   make bench      run the benchmarks
#   make asan|tsan  build and run the tests under ASan+UBSan / TSan (build-asan/, build-tsan/)
#   make fuzz       build the libFuzzer targets with clang and run each for FUZZ_SECONDS
#   make format-check   fail when a source is not formatted as .clang-format says
#   make gpu-kit    build gpu-kit/, the self-contained GPU checks for a lent GPU machine
#                   (needs nvcc; docs/gpu.md), and check its size and libraries
#   make install    build, then install under PREFIX (default /usr/local), staged under DESTDIR
#                   if set; the config goes to /etc/fairsched only when none is there yet

BUILD        ?= build
JOBS         ?= $(shell nproc)
FUZZ_SECONDS ?= 30
CMAKE_FLAGS  ?=
PREFIX       ?= /usr/local
DESTDIR      ?=

.PHONY: all deps configure test stress demo gateway-demo bench install asan tsan fuzz clean format format-check gpu-kit

all: configure
	cmake --build $(BUILD) -j $(JOBS)

deps:
	@scripts/install-deps

$(BUILD)/CMakeCache.txt:
	@scripts/install-deps --quiet
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

configure: $(BUILD)/CMakeCache.txt

test: all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# Only the stress tests (many processes, threads or random rounds; also part of make test).
stress: all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L stress

# Builds only what the demo runs (the daemon, the bench, the reference worker).
demo: configure
	cmake --build $(BUILD) -j $(JOBS) --target fairschedd fairsched-bench fairsched-worker
	scripts/demo $(BUILD)

# fairschedd + a fake upstream + fairsched-gateway under a temporary
# directory: a stream, a 429, a tenant served during another's flood.
gateway-demo: configure
	cmake --build $(BUILD) -j $(JOBS) --target fairschedd fairsched-gateway
	scripts/gateway-demo $(BUILD)

bench: all
	$(BUILD)/bin/fairsched-bench core
	$(BUILD)/bin/fairsched-microbench --benchmark_min_time=0.2
	python3 bench/python_asyncio_bench.py --build $(BUILD)

install: all
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix "$(PREFIX)"

asan:
	@scripts/install-deps --quiet
	cmake -S . -B build-asan -DFAIRSCHED_SANITIZE=address -DFAIRSCHED_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug $(CMAKE_FLAGS)
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

tsan:
	@scripts/install-deps --quiet
	cmake -S . -B build-tsan -DFAIRSCHED_SANITIZE=thread -DFAIRSCHED_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug $(CMAKE_FLAGS)
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j $(JOBS)

fuzz:
	@scripts/install-deps --quiet
	CC=clang CXX=clang++ cmake -S . -B build-fuzz -DFAIRSCHED_FUZZ=ON -DFAIRSCHED_TESTS=OFF -DFAIRSCHED_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	cmake --build build-fuzz -j $(JOBS)
	scripts/run-fuzz build-fuzz $(FUZZ_SECONDS)

# Release for sm_90 into build-gpu-kit/, assembled into gpu-kit/ (docs/gpu.md).
gpu-kit:
	@scripts/install-deps --quiet
	JOBS=$(JOBS) scripts/gpu-kit

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp' '*.h' '*.cu')

# Fails (and names the files) when any source is not as .clang-format says.
format-check:
	@scripts/install-deps --quiet
	clang-format --dry-run -Werror $$(git ls-files '*.cpp' '*.hpp' '*.h' '*.cu')

clean:
	rm -rf build build-asan build-tsan build-fuzz build-gpu-kit gpu-kit
