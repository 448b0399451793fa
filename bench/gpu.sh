#!/usr/bin/env bash
# The trainer's GPU checks in one run, for a lent GPU machine whose image has torch, transformers and peft
# but not pydantic, openai, trl or datasets: those travel as wheels in .whl/ (WHL=dir to point elsewhere),
# downloaded on a machine with the registry for the GPU machine's Python (3.12 there), e.g.
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux2014_x86_64 -d .whl pydantic pydantic_core annotated_types typing_inspection \
#     openai distro jiter sniffio trl datasets dill multiprocess pytest-asyncio
# It runs pytest -m gpu on the trainer, then bench/trainer.py at 1.5B, 7B and 14B, each side seeing an
# 80 GiB card (GPU_GIB), and writes every log and result to $OUT (default bench/results/gpu-<date>/).
# Each part has its own time limit (SHAPES="shape:steps:seconds ..."), so one that hangs cannot eat the
# others' time; SIDES=ours runs our trainer only. At most 8 files land in $OUT (what a lent machine returns).
# Sizing (H200, 2026-11-26): pytest -m gpu ~60 s; at 1.5B TRL's side alone takes ~110 s (model build and
# load included), at 7B ~160 s, at 14B ~190 s, and ours about as long. So both sides at 1.5B and 7B (the
# speed targets) fill one 10-minute call; 14B is a second call: SHAPES=14b:2:380 SIDES=ours,trl PYTEST_S=0.
# Ours runs first: it is what changed, and a part cut at its limit then still has our figures.
set -u
OUT=${OUT:-bench/results/gpu-$(date -u +%Y%m%d)}
mkdir -p "$OUT"
WHL=${WHL:-.whl}
if ls "$WHL"/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHL"/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
fi
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
# The models are written once and read by each side's process: in memory where there is room.
if [ "$(df --output=avail -BG /dev/shm 2>/dev/null | tail -1 | tr -dc 0-9)" -gt 40 ] 2>/dev/null; then
    export BENCH_TMP=/dev/shm
fi
GIB=${GPU_GIB:-79.6}  # an H100 80GB's memory, whatever the card (issue 12's targets are for that card)
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import torch, transformers, peft; print(torch.__version__, transformers.__version__, peft.__version__)"; df -h /dev/shm /tmp; } 2>&1 | tee "$OUT/machine.txt"
# test_gpu_engine needs vLLM and Prefect, which a bare GPU machine lacks: it runs only where both import.
engine=$(python3 -c "import vllm, prefect" 2>/dev/null && echo tests/pipeline/test_gpu_engine.py)
[ "${PYTEST_S:-90}" -gt 0 ] && timeout -k 5 ${PYTEST_S:-90} python3 -m pytest -m gpu tests/training $engine \
    -p no:cacheprovider -q -rs 2>&1 | tee "$OUT/pytest-gpu.txt"
for spec in ${SHAPES:-1.5b:3:210 7b:2:280}; do
    IFS=: read -r shape steps limit <<<"$spec"
    echo "== $shape ($(date -u +%T))"
    # One profiled step of ours at the shapes in PROFILE (the busiest operators on the GPU, for the next fix).
    prof=()
    case " ${PROFILE-1.5b 7b} " in *" $shape "*) prof=(--profile "$OUT/profile-ours-$shape.txt") ;; esac
    timeout -k 5 "$limit" python3 bench/trainer.py --device cuda --shape "$shape" --steps "$steps" --rounds 1 \
        --sides "${SIDES:-ours,trl}" --gpu-gib "$GIB" --out "$OUT/trainer-cuda-$shape.txt" "${prof[@]}" 2>&1 \
        | tee -a "$OUT/log.txt" | grep -v Warning
done
echo "== done ($(date -u +%T))"
