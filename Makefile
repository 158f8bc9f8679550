# obsspec: `make demo` and `make test` work on a fresh machine; `setup` is their shared,
# idempotent first step (quick when everything is already in place).
SHELL := /bin/bash
VENV ?= .venv
BIN := $(VENV)/bin
# The inference engine is a platform choice: vLLM's CUDA build where a GPU answers, else the CPU build.
EXTRA ?= $(shell if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then echo gpu; else echo cpu; fi)
STAMP := $(VENV)/.installed-$(EXTRA)-$(shell cat pyproject.toml scripts/install-python.sh | sha256sum | cut -c1-12)
PYTEST_ARGS ?=
# Where `make demo` writes its tasks and datasets (rerunning it resumes, so it is quick).
DEMO ?= demo-run
# No model hub is reachable (or needed): every model is a local directory.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_NO_ADVISORY_WARNINGS := 1

.PHONY: setup python docker image model browser demo test lint bench clean

setup: python docker image model browser

python: $(STAMP)

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
	$(BIN)/obsspec env generate --out $(DEMO)/tasks --n 8 --seed 0 >/dev/null
	$(BIN)/obsspec collect --tasks $(DEMO)/tasks --out $(DEMO)/oracle --policy oracle -c 4
	$(BIN)/obsspec env generate --out $(DEMO)/eval-tasks --n 4 --seed 1 >/dev/null
	@# The policy: the default model warm-started on the oracle's episodes (trained once, then
	@# reused), scored against its base on tasks of another seed; every later step uses it.
	if [ -f $(DEMO)/policy/obsspec-train.json ]; then \
		$(BIN)/obsspec sft --eval-only --model $(DEMO)/policy --eval-tasks $(DEMO)/eval-tasks; \
	else \
		$(BIN)/obsspec sft --data $(DEMO)/oracle --out $(DEMO)/policy --eval-tasks $(DEMO)/eval-tasks \
			--epochs 3 --lr 2e-4 --batch-tokens 4096 --overwrite; \
	fi
	$(BIN)/obsspec collect --tasks $(DEMO)/tasks --out $(DEMO)/policy-run --policy $(DEMO)/policy -c 8
	@# The world model: trained on the oracle's episodes, scored on tasks of another seed.
	$(BIN)/obsspec collect --tasks $(DEMO)/eval-tasks --out $(DEMO)/eval-oracle --policy oracle -k 2 -c 4
	if [ -f $(DEMO)/wm/obsspec-train.json ]; then \
		$(BIN)/obsspec train-wm --eval-only --model $(DEMO)/wm --data $(DEMO)/eval-oracle; \
	else \
		$(BIN)/obsspec train-wm --data $(DEMO)/oracle --eval-data $(DEMO)/eval-oracle \
			--out $(DEMO)/wm --epochs 3 --lr 2e-4 --batch-tokens 4096 --overwrite; \
	fi

test: setup
	$(BIN)/pytest --require-capabilities $(PYTEST_ARGS)

lint: python
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: setup
	@for script in bench/*.py; do echo "== $$script" >&2; $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache $(DEMO)
