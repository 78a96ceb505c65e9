# The two commands of the README:
#   make run   installs what is missing, builds, and runs the main job on built-in defaults
#   make test  installs what is missing, builds, and runs the whole test suite (ctest)
#   make test-sanitize  the same suite built with AddressSanitizer and UndefinedBehaviorSanitizer
#                       (in build-san), with more fuzzing iterations; .ci/run runs both
BUILD_DIR ?= build
SAN_DIR ?= build-san
# Sanitizer runtime options: any report fails the run; Open MPI's start-up allocations are
# process-lifetime state, not leaks (tests/sanitizers/lsan.supp). The tests whose processes start
# MPI (ctest label `mpi`) run with the slow unwinder, which records stacks through Open MPI's
# components (built without frame pointers and unloaded at exit) so that their allocations show
# the frames the suppressions name; it makes every allocation about 3x dearer, so the other
# tests keep the fast one.
ASAN_BASE = detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=0
SAN_ENV = UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
          LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizers/lsan.supp:print_suppressions=0 \
          SHARDCAST_FUZZ_ITERATIONS=1500
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
ifeq ($(CI),true)
CMAKE_FLAGS += -DSHARDCAST_WERROR=ON
endif

.PHONY: all deps configure build run test test-sanitize clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: deps $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	./$(BUILD_DIR)/cli/shardcast plan --model gpt3-175b --cluster dgx-a100 --gpus 1024 --gbs 1536

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

$(SAN_DIR)/CMakeCache.txt:
	cmake -S . -B $(SAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1" \
	  -DSHARDCAST_SANITIZE="address;undefined" -DSHARDCAST_CUDA=OFF -DSHARDCAST_BUILD_BENCH=OFF $(CMAKE_FLAGS)

test-sanitize: deps $(SAN_DIR)/CMakeCache.txt
	cmake --build $(SAN_DIR) -j $(JOBS)
	$(SAN_ENV) ASAN_OPTIONS=$(ASAN_BASE) ctest --test-dir $(SAN_DIR) --output-on-failure -j $(JOBS) -LE mpi
	$(SAN_ENV) ASAN_OPTIONS=$(ASAN_BASE):fast_unwind_on_malloc=0 ctest --test-dir $(SAN_DIR) --output-on-failure -L mpi

clean:
	rm -rf $(BUILD_DIR) $(SAN_DIR)
