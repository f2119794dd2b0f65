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
	test-wheel wheel lint bench build deps deps-demo format stubs clean

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
SANITIZED_TESTS = core_test io_test media_test sampling_test dataset_test transform_test \
  image_test pipeline_test etl_test
test-sanitize: deps
	cmake -S . -B $(SANITIZE_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSTOKER_SANITIZE=address,undefined -DSTOKER_BUILD_PYTHON=OFF $(CMAKE_FLAGS) > /dev/null
	cmake --build $(SANITIZE_BUILD) -j $(JOBS) --target $(SANITIZED_TESTS)
	for t in $(SANITIZED_TESTS); do \
	  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  STOKER_TEST_MEDIA_DIR=$(abspath $(BUILD))/test-media $(SANITIZE_BUILD)/$$t --gtest_brief=1 \
	  || exit 1; done
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DSTOKER_SANITIZE=thread -DSTOKER_BUILD_PYTHON=OFF $(CMAKE_FLAGS) > /dev/null
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target pipeline_test sampling_test
	TSAN_OPTIONS=halt_on_error=1 STOKER_TEST_MEDIA_DIR=$(abspath $(BUILD))/test-media \
	  $(TSAN_BUILD)/pipeline_test --gtest_brief=1
	TSAN_OPTIONS=halt_on_error=1 $(TSAN_BUILD)/sampling_test --gtest_brief=1

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
# behaviour, or an input taking over 10 s fails it and leaves the input in $(FUZZ_BUILD)/.
FUZZ_TARGETS = frame_table_fuzz episode_index_fuzz video_reader_fuzz image_decoder_fuzz \
  shard_index_fuzz shard_members_fuzz
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
	for t in $(FUZZ_TARGETS); do mkdir -p $(FUZZ_BUILD)/found/$$t; \
	  if (cd $(FUZZ_BUILD) && ./$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	      -rss_limit_mb=4096 -print_final_stats=1 found/$$t seeds/$$t > $$t.log 2>&1); then \
	    echo "$$t: $$(grep -E '^(#[0-9]+|stat::number_of_executed_units)' $(FUZZ_BUILD)/$$t.log | tail -n 1)"; \
	  else tail -n 40 $(FUZZ_BUILD)/$$t.log; exit 1; fi; done

fuzz:
	$(MAKE) test-fuzz FUZZ_SECONDS=600

# Parity with LeRobot's own LeRobotDataset. lerobot brings PyTorch and more, so it lives in its
# own virtual environment; `make test` skips this comparison when lerobot is not importable.
LEROBOT_VENV ?= .venv-lerobot
$(LEROBOT_VENV)/.stamp: requirements-lerobot.txt .stamps/apt
	@[ -x $(LEROBOT_VENV)/bin/python ] || python3 -m venv $(LEROBOT_VENV)
	$(LEROBOT_VENV)/bin/python -m pip install -q -r requirements-lerobot.txt
	@touch $@

test-lerobot: build $(LEROBOT_VENV)/.stamp
	PYTHONPATH=python $(LEROBOT_VENV)/bin/python -m pytest -q tests/python/test_lerobot_parity.py

## The wheel -----------------------------------------------------------------------------

# A wheel of this platform that carries its shared libraries (FFmpeg's, libcurl's: see
# THIRD_PARTY.md), so it installs without compiling on a machine without them: built by
# scikit-build-core into $(WHEEL_BUILD) (incremental), then repaired by auditwheel into dist/.
WHEEL_BUILD ?= build-wheel
$(VENV)/.wheel-stamp: requirements-wheel.txt $(VENV)/.stamp
	$(PYTHON) -m pip install -q -r requirements-wheel.txt
	@touch $@

wheel: deps $(VENV)/.wheel-stamp
	rm -rf dist/raw && mkdir -p dist/raw
	PATH=$(abspath $(VENV))/bin:$$PATH $(PYTHON) -m pip wheel . --no-deps --no-build-isolation \
	  -w dist/raw -Cbuild-dir=$(WHEEL_BUILD) -Ccmake.define.STOKER_WERROR=OFF
	rm -f dist/stoker-*.whl
	PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/auditwheel repair dist/raw/stoker-*.whl -w dist
	@ls -l dist/stoker-*.whl

# The repaired wheel installed into a fresh virtual environment (no system site-packages, no
# build tools used) decodes a video made by ffmpeg; its FFmpeg is the wheel's own copy.
test-wheel: wheel
	$(PYTHON) tests/wheel/check_wheel.py dist/stoker-*.whl

## Demo and benchmarks --------------------------------------------------------------------

demo: build
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

## Housekeeping ---------------------------------------------------------------------------

# Type stubs of the compiled module, checked in so editors and type checkers see its API.
stubs: build
	PYTHONPATH=python $(PYTHON) -m nanobind.stubgen -m stoker._core -o python/stoker/_core.pyi

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD) $(TSAN_BUILD) $(CLANG_BUILD) $(FUZZ_BUILD) \
	  $(WHEEL_BUILD) dist python/stoker/_core*.so
