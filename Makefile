# stoker's two front doors: `make demo` and `make test`. Both install what is missing first
# (Debian packages with apt-get, Python packages into .venv), and are quick when it is there.
SHELL := /bin/bash
.DEFAULT_GOAL := demo

VENV ?= .venv
PYTHON := $(VENV)/bin/python
BUILD ?= build
SANITIZE_BUILD ?= build-sanitize
TSAN_BUILD ?= build-tsan
CLANG_BUILD ?= build-clang
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 30
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

APT_PACKAGES := build-essential cmake ninja-build pkg-config ffmpeg libavcodec-dev libavformat-dev \
	libavutil-dev libswscale-dev libgtest-dev libbenchmark-dev python3 python3-venv python3-dev clang \
	libclang-rt-14-dev libcurl4-openssl-dev libturbojpeg0-dev libjpeg62-turbo-dev libspng-dev libwebp-dev
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test test-cpp test-python test-sanitize test-thread-safety test-fuzz fuzz test-lerobot \
	lerobot-module \
	test-wheel wheel lint bench build module deps deps-demo format stubs clean

## Dependencies ---------------------------------------------------------------------------

.stamps/apt: Makefile
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "Installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@mkdir -p .stamps && touch $@

# Two sets of Python packages in the one .venv, each installed once (its stamp) and again only
# when its list changes, with pip's progress shown: the demo's (requirements-demo.txt: building
# and running stoker, the doctor's plots; no PyTorch) for `make demo` and `make build`, and on
# top of it the tests' (requirements-dev.txt: PyTorch with CUDA, Ray, moto, the linters, ...)
# for `make test`. README.md gives the sizes of both.
$(VENV)/.demo-stamp: requirements-demo.txt .stamps/apt
	@[ -x $(PYTHON) ] || python3 -m venv $(VENV)
	@echo "Installing the demo's Python packages into $(VENV) (requirements-demo.txt)"
	$(PYTHON) -m pip install --upgrade pip
	$(PYTHON) -m pip install -r requirements-demo.txt
	@touch $@

$(VENV)/.stamp: requirements-dev.txt $(VENV)/.demo-stamp
	@echo "Installing the tests' Python packages into $(VENV) (requirements-dev.txt: PyTorch" \
	  "with CUDA, Ray and more, several GB: once)"
	$(PYTHON) -m pip install -r requirements-dev.txt
	@touch $@

deps-demo: .stamps/apt $(VENV)/.demo-stamp
deps: deps-demo $(VENV)/.stamp

## Build ----------------------------------------------------------------------------------

$(BUILD)/build.ninja: CMakeLists.txt | deps-demo
	cmake -S . -B $(BUILD) -G Ninja -DPython_EXECUTABLE=$(abspath $(PYTHON)) $(CMAKE_FLAGS)

build: deps-demo $(BUILD)/build.ninja $(VENV)/bin/stoker
	cmake --build $(BUILD) -j $(JOBS)

# The Python module alone (what the demo runs), without the C++ tests.
module: deps-demo $(BUILD)/build.ninja $(VENV)/bin/stoker
	cmake --build $(BUILD) -j $(JOBS) --target _core

# The project installed in its own .venv, editable: `import stoker` from any folder and the
# `stoker` command (after `source .venv/bin/activate`) use python/ and the module the build
# puts there; no second build of the engine, as `pip install -e .` would make.
$(VENV)/bin/stoker: | deps-demo
	echo "$(abspath python)" > "$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/stoker-editable.pth"
	printf '#!%s\nimport sys\nfrom stoker.cli import main\nsys.exit(main())\n' "$(abspath $(PYTHON))" > $@
	chmod +x $@

## Tests ----------------------------------------------------------------------------------

test: lint test-cpp test-sanitize test-thread-safety test-fuzz test-python test-wheel

test-cpp: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# Ray's tests run in pytest processes of their own, one per cluster: a Ray driver installs
# signal handlers and keeps cluster state for the life of its process, which the rest of the
# suite must not share (test_ray.py: one node; test_ray_cluster.py: three).
test-python: deps build
	PYTHONPATH=python $(PYTHON) -m pytest -q tests/python --ignore=tests/python/test_ray.py \
	  --ignore=tests/python/test_ray_cluster.py
	PYTHONPATH=python $(PYTHON) -m pytest -q tests/python/test_ray.py
	PYTHONPATH=python $(PYTHON) -m pytest -q tests/python/test_ray_cluster.py

# The Python package: ruff's checks and formatting, and mypy (with the checked-in _core.pyi).
# Configured in pyproject.toml; `$(VENV)/bin/ruff format python` applies the formatting.
lint: deps
	$(VENV)/bin/ruff check python
	$(VENV)/bin/ruff format --check python
	$(VENV)/bin/mypy

# The C++ tests again, bad input included, under AddressSanitizer + UndefinedBehaviorSanitizer
# (with LeakSanitizer), then the loader's threads and the samplers' shared caches (the shard
# stream's epochs, filled from many threads) under ThreadSanitizer.
# The longest first: they run $(JOBS) at a time, each binary's log kept beside it and shown when
# it fails. Built -O1 with line tables only (-g1): what sanitizer reports need (file and line of
# each frame), at under half the compile time of -O2 -g.
SANITIZED_TESTS = media_test pipeline_test image_test io_test core_test etl_test sampling_test \
  dataset_test transform_test
SANITIZER_FLAGS = -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DSTOKER_BUILD_PYTHON=OFF
# Runs the test binaries $(2) of build folder $(1) $(JOBS) at a time, with the environment $(3).
define run_tests_in_parallel
	printf '%s\n' $(2) | xargs -P $(JOBS) -I{} sh -c '$(3) $(1)/{} --gtest_brief=1 > $(1)/{}.log \
	  2>&1 && echo "{}: $$(grep PASSED $(1)/{}.log)" || { cat $(1)/{}.log; echo "{} FAILED"; exit 255; }'
endef
test-sanitize: deps
	cmake -S . -B $(SANITIZE_BUILD) -G Ninja $(SANITIZER_FLAGS) -DSTOKER_SANITIZE=address,undefined \
	  $(CMAKE_FLAGS) > /dev/null
	cmake --build $(SANITIZE_BUILD) -j $(JOBS) --target $(SANITIZED_TESTS)
	$(call run_tests_in_parallel,$(SANITIZE_BUILD),$(SANITIZED_TESTS),ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1 STOKER_TEST_MEDIA_DIR=$(abspath $(BUILD))/test-media)
	cmake -S . -B $(TSAN_BUILD) -G Ninja $(SANITIZER_FLAGS) -DSTOKER_SANITIZE=thread $(CMAKE_FLAGS) \
	  > /dev/null
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target pipeline_test sampling_test
	$(call run_tests_in_parallel,$(TSAN_BUILD),pipeline_test sampling_test,TSAN_OPTIONS=halt_on_error=1 \
	  STOKER_TEST_MEDIA_DIR=$(abspath $(BUILD))/test-media)

# Every library again with clang's thread-safety analysis (-Wthread-safety, as errors): each
# GUARDED_BY field is touched only with its mutex held. The probe checks that the analysis is
# on: clang must reject it.
test-thread-safety: deps
	CXX=clang++ cmake -S . -B $(CLANG_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug \
	  -DSTOKER_BUILD_TESTS=OFF -DSTOKER_BUILD_PYTHON=OFF -DCMAKE_CXX_FLAGS=-Wthread-safety \
	  $(CMAKE_FLAGS) > /dev/null
	cmake --build $(CLANG_BUILD) -j $(JOBS)
	! clang++ -std=c++20 -fsyntax-only -Wthread-safety -Werror -Isrc cmake/thread_safety_probe.cc \
	  2> $(CLANG_BUILD)/probe.log
	grep -q "requires holding mutex" $(CLANG_BUILD)/probe.log

# libFuzzer on each parser of untrusted bytes (the frame table, the episode index, a shard's tar
# headers and saved index, a video's container and decoder over bytes in memory), from seeds the C++ tests write: FUZZ_SECONDS
# each (30 in `make test`; `make fuzz` runs 10 minutes each). A crash, a leak, undefined
# behaviour, or an input taking over 10 s fails it and leaves the input in $(FUZZ_BUILD)/. The
# fuzzers run $(JOBS) at a time (each on one core, for its full FUZZ_SECONDS).
FUZZ_TARGETS = frame_table_fuzz episode_index_fuzz video_reader_fuzz image_decoder_fuzz \
  shard_index_fuzz shard_samples_fuzz shard_members_fuzz
test-fuzz: build
	CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSTOKER_FUZZ=ON -DSTOKER_BUILD_TESTS=OFF -DSTOKER_BUILD_PYTHON=OFF $(CMAKE_FLAGS) > /dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(FUZZ_TARGETS)
	STOKER_FUZZ_CORPUS=$(abspath $(FUZZ_BUILD))/seeds STOKER_TEST_MEDIA_DIR=$(abspath $(BUILD))/test-media \
	  $(BUILD)/media_test --gtest_filter='FuzzSeeds.*' --gtest_brief=1
	STOKER_FUZZ_CORPUS=$(abspath $(FUZZ_BUILD))/seeds STOKER_TEST_MEDIA_DIR=$(abspath $(BUILD))/test-media \
	  $(BUILD)/dataset_test --gtest_filter='FuzzSeeds.*' --gtest_brief=1
	STOKER_FUZZ_CORPUS=$(abspath $(FUZZ_BUILD))/seeds $(BUILD)/image_test --gtest_filter='FuzzSeeds.*' \
	  --gtest_brief=1
	printf '%s\n' $(FUZZ_TARGETS) | xargs -P $(JOBS) -I{} sh -c 'mkdir -p $(FUZZ_BUILD)/found/{}; \
	  if (cd $(FUZZ_BUILD) && ./{} -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	      -rss_limit_mb=4096 -print_final_stats=1 found/{} seeds/{} > {}.log 2>&1); then \
	    echo "{}: $$(grep -E "^(#[0-9]+|stat::number_of_executed_units)" $(FUZZ_BUILD)/{}.log | tail -n 1)"; \
	  else tail -n 40 $(FUZZ_BUILD)/{}.log; exit 255; fi'

fuzz:
	$(MAKE) test-fuzz FUZZ_SECONDS=600

# Parity with LeRobot's own LeRobotDataset, for the LeRobot of the day (0.6.1 and
# lerobot-lancedb, in .venv-lerobot under Python 3.12, which LeRobot 0.6 requires) and for
# LeRobot 0.4.4 (in .venv-lerobot-044 under the tests' Python). lerobot brings PyTorch and more,
# so each lives in its own virtual environment; `make test` skips these comparisons. Python 3.12:
# `python3.12` on the path, or pyenv's (these machines have it); elsewhere `pyenv install 3.12`
# (or Debian 13's python3.12 package), or `make test-lerobot PYTHON312=/path/to/python3.12`.
PYTHON312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) \
  $(shell command -v python3.12))
LEROBOT_VENV ?= .venv-lerobot
LEROBOT044_VENV ?= .venv-lerobot-044
LEROBOT_BUILD ?= build-lerobot
# A .venv-lerobot of another Python (an earlier LeRobot's) is made anew.
$(LEROBOT_VENV)/.stamp: requirements-lerobot.txt .stamps/apt
	@if ! "$(PYTHON312)" -c "" 2>/dev/null; then echo "LeRobot 0.6 needs Python 3.12, which was not found:" \
	  "install it (pyenv install 3.12) or give PYTHON312=/path/to/python3.12"; exit 1; fi
	@[ "$$($(LEROBOT_VENV)/bin/python -c 'import sys; print(sys.version_info[:2])' 2>/dev/null)" \
	  = "(3, 12)" ] || { rm -rf $(LEROBOT_VENV) && $(PYTHON312) -m venv $(LEROBOT_VENV); }
	$(LEROBOT_VENV)/bin/python -m pip install -q -r requirements-lerobot.txt
	@touch $@

$(LEROBOT044_VENV)/.stamp: requirements-lerobot-044.txt .stamps/apt
	@[ -x $(LEROBOT044_VENV)/bin/python ] || python3 -m venv $(LEROBOT044_VENV)
	$(LEROBOT044_VENV)/bin/python -m pip install -q -r requirements-lerobot-044.txt
	@touch $@

# stoker's module for .venv-lerobot's Python (python/stoker/_core.cpython-312-*.so, beside the
# tests' own), built alone in its own folder.
lerobot-module: $(LEROBOT_VENV)/.stamp
	cmake -S . -B $(LEROBOT_BUILD) -G Ninja -DPython_EXECUTABLE=$(abspath $(LEROBOT_VENV)/bin/python) \
	  -DSTOKER_BUILD_TESTS=OFF $(CMAKE_FLAGS) > /dev/null
	cmake --build $(LEROBOT_BUILD) -j $(JOBS) --target _core

test-lerobot: build lerobot-module $(LEROBOT044_VENV)/.stamp
	PYTHONPATH=python $(LEROBOT_VENV)/bin/python -m pytest -q tests/python/test_lerobot_parity.py \
	  tests/python/test_lance_parity.py
	PYTHONPATH=python $(LEROBOT044_VENV)/bin/python -m pytest -q tests/python/test_lerobot_parity.py

## The wheel -----------------------------------------------------------------------------

# A wheel of this platform that carries its shared libraries (FFmpeg's, libcurl's: see
# THIRD_PARTY.md), so it installs without compiling on a machine without them: built by
# scikit-build-core into $(WHEEL_BUILD) (incremental), then repaired by auditwheel into dist/.
# It needs the demo's Python packages and requirements-wheel.txt, not the tests'.
WHEEL_BUILD ?= build-wheel
$(VENV)/.wheel-stamp: requirements-wheel.txt $(VENV)/.demo-stamp
	$(PYTHON) -m pip install -q -r requirements-wheel.txt
	@touch $@

# The wheel of the module built in folder $(1), scikit-build-core's options $(2), repaired.
define pack_wheel
	rm -rf dist/raw && mkdir -p dist/raw
	PATH=$(abspath $(VENV))/bin:$$PATH $(PYTHON) -m pip wheel . --no-deps --no-build-isolation \
	  -w dist/raw -Cbuild-dir=$(1) $(2)
	rm -f dist/stoker-*.whl
	PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/auditwheel repair dist/raw/stoker-*.whl -w dist
	@ls -l dist/stoker-*.whl
endef

wheel: deps-demo $(VENV)/.wheel-stamp
	$(call pack_wheel,$(WHEEL_BUILD),-Ccmake.define.STOKER_WERROR=OFF)

# The repaired wheel installed into a fresh virtual environment (no system site-packages, no
# build tools used) decodes a video made by ffmpeg; its FFmpeg is the wheel's own copy. It packs
# the module the tests built and ran ($(BUILD): the same Release configuration, its tests and
# warnings-as-errors kept, so nothing is compiled again).
test-wheel: build $(VENV)/.wheel-stamp
	$(call pack_wheel,$(BUILD),-Ccmake.define.STOKER_BUILD_TESTS=ON -Ccmake.define.STOKER_WERROR=ON)
	$(PYTHON) tests/wheel/check_wheel.py dist/stoker-*.whl

## Demo and benchmarks --------------------------------------------------------------------

demo: module
	PYTHONPATH=python $(PYTHON) demo/doctor_demo.py

$(VENV)/.bench-stamp: requirements-bench.txt $(VENV)/.stamp
	$(PYTHON) -m pip install -q -r requirements-bench.txt || \
	  echo "Some benchmark peers could not be installed; they will be reported as missing."
	@touch $@

bench: deps $(VENV)/.bench-stamp
	cmake -S . -B $(BUILD) -G Ninja -DPython_EXECUTABLE=$(abspath $(PYTHON)) \
	  -DSTOKER_BUILD_BENCHMARKS=ON $(CMAKE_FLAGS) > /dev/null
	cmake --build $(BUILD) -j $(JOBS)
	PYTHONPATH=python $(PYTHON) bench/compare_decoders.py --build $(BUILD)
	PYTHONPATH=python $(PYTHON) bench/sampler_bench.py
	PYTHONPATH=python $(PYTHON) bench/index_bench.py
	PYTHONPATH=python $(PYTHON) bench/loader_bench.py --build $(BUILD) $(LOADER_BENCH_ARGS)
	PYTHONPATH=python $(PYTHON) bench/etl_bench.py
	PYTHONPATH=python $(PYTHON) bench/remote_bench.py $(REMOTE_BENCH_ARGS)
	# Ray's own LeRobot reader needs lerobot: in .venv-lerobot when it is there (make
	# test-lerobot), else its row reads "could not run".
	if [ -x $(LEROBOT_VENV)/bin/python ]; then \
	  PYTHONPATH=python $(LEROBOT_VENV)/bin/python bench/ray_bench.py $(RAY_BENCH_ARGS); \
	else PYTHONPATH=python $(PYTHON) bench/ray_bench.py $(RAY_BENCH_ARGS); fi
	PYTHONPATH=python $(PYTHON) bench/image_bench.py
	PYTHONPATH=python $(PYTHON) bench/shard_bench.py $(SHARD_BENCH_ARGS)
	PYTHONPATH=python $(PYTHON) bench/mix_bench.py
	# stoker check, shallow and --deep, against a Python loop over LeRobot-style item reads.
	PYTHONPATH=python $(PYTHON) bench/check_bench.py $(CHECK_BENCH_ARGS)
	# How costs grow with size (samplers to 10^10, indexes to 10^6 episodes, 10^5 shards, 10^4
	# S3 objects), then Loader memory over 20 million samples; about 10 minutes each.
	PYTHONPATH=python $(PYTHON) bench/scale_bench.py $(SCALE_BENCH_ARGS)
	PYTHONPATH=python $(PYTHON) bench/soak_bench.py $(SOAK_BENCH_ARGS)
	# LeRobot's training loop against stoker's: in .venv-lerobot when it is there (make
	# test-lerobot), else the LeRobot row reads "not measured".
	if [ -x $(LEROBOT_VENV)/bin/python ]; then $(LEROBOT_VENV)/bin/python bench/parity_bench.py; \
	else PYTHONPATH=python $(PYTHON) bench/parity_bench.py; fi
	# LeRobot 0.6 windows from the MP4 and the Lance copy: stoker, LeRobot 0.6.1 and
	# lerobot-lancedb; depth windows against RGB ones (needs make test-lerobot's .venv-lerobot).
	if [ -x $(LEROBOT_VENV)/bin/python ]; then $(MAKE) lerobot-module && \
	  $(LEROBOT_VENV)/bin/python bench/lerobot06_bench.py; \
	else PYTHONPATH=python $(PYTHON) bench/lerobot06_bench.py; fi

## Housekeeping ---------------------------------------------------------------------------

# Type stubs of the compiled module, checked in so editors and type checkers see its API.
stubs: build
	PYTHONPATH=python $(PYTHON) -m nanobind.stubgen -m stoker._core -p python/stubgen_patterns.txt \
	  -o python/stoker/_core.pyi

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD) $(TSAN_BUILD) $(CLANG_BUILD) $(FUZZ_BUILD) \
	  $(WHEEL_BUILD) $(LEROBOT_BUILD) dist python/stoker/_core*.so
