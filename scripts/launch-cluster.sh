#!/usr/bin/env bash
# Bring up a GPU node for art-pipeline runs with SkyPilot (deployments/gpu-node.sky.yaml): the project
# installed, a vLLM replica on port 8000 and a Prefect worker for the `art-gpu` work pool, storage on S3.
# Every value is checked here before SkyPilot is called, so a mistake costs seconds, not a billed node.
#
#   export ART_STORAGE_ROOT=s3://my-bucket/art PREFECT_API_URL=https://prefect.example.com/api \
#          AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... ART_INFERENCE_API_KEY=...
#   scripts/launch-cluster.sh --name art-gpu-1 --base-model Qwen/Qwen2.5-7B-Instruct --max-hours 12
#   scripts/launch-cluster.sh --name art-gpu-8 --base-model Qwen/Qwen2.5-7B-Instruct --train-ranks 7  # H100:8
#
# Settings missing from the environment are taken from ./.env (or --env-file). SkyPilot runs from .venv-sky
# (`make sky`), or $SKY, or `sky` on PATH. docs/clusters.md: pointing runs at the node, stopping it, VS Code.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TASK="deployments/gpu-node.sky.yaml"
PORT=8000  # the task file's `ports` and the replica's --port

usage() {
  cat <<EOF
Usage: scripts/launch-cluster.sh --base-model MODEL [options]

Launch a SkyPilot GPU node ($TASK) with a vLLM replica (port $PORT) and a Prefect worker for the
art-gpu work pool. It bills until you run \`sky down NAME\` (or \`sky stop NAME\`).

Options:
  --base-model MODEL    hub id or path the replica serves: the runs' base_model (or ART_BASE_MODEL)
  --name NAME           cluster name (default: art-gpu); also the ssh host VS Code connects to
  --gpus SPEC           accelerators, e.g. H100:1 or A100:1 (default: the task file's H100 or A100-80GB)
  --train-ranks N       size the node for train steps of N GPUs (train.ranks up to N): N+1 GPUs, the replica
                        on one of its own and the worker on exactly N
  --gpu-type TYPE       with --train-ranks: the GPU to ask for, e.g. A100-80GB or L40S (default: H100)
  --replica-shares      with --train-ranks: N GPUs, the replica sharing the first with the step's rank 0
  --infra INFRA         where to launch: aws, gcp/us-central1, k8s/my-context ... (default: SkyPilot picks)
  --use-spot            spot instances: cheaper, may be preempted
  --max-hours H         tear the node down H hours after launch, whatever runs (SkyPilot autodown)
  --replica-args ARGS   more flags for python -m art_core.replica, e.g. "--max-lora-rank 32"
  --env-file FILE       settings the environment leaves unset (default: ./.env, if present)
  --dry-run             SkyPilot's dry run: resources and price, nothing provisioned (needs a cloud enabled)
  -y, --yes             skip SkyPilot's confirmation
  -h, --help            this help

Environment (or the --env-file):
  ART_STORAGE_ROOT      s3://bucket/prefix, the runs' storage (required; a local folder is not on the node)
  PREFECT_API_URL       the Prefect server's API as the node reaches it (required; not localhost)
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY   S3 credentials (required)
  ART_INFERENCE_API_KEY the replica's API key; runs send the same one (required)
  optional: AWS_ENDPOINT_URL, AWS_DEFAULT_REGION, PREFECT_API_KEY (Prefect Cloud),
            PREFECT_API_AUTH_STRING (a server with basic auth), HF_TOKEN, WANDB_API_KEY
EOF
}

die() { echo "launch-cluster: $*" >&2; exit 2; }

NAME="art-gpu" GPUS="" INFRA="" SPOT=0 MAX_HOURS="" REPLICA_ARGS="" DRY_RUN=0 YES=0 ENV_FILE=".env"
TRAIN_RANKS="" GPU_TYPE="" REPLICA_GPU="own"
BASE_MODEL="${ART_BASE_MODEL:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --base-model|--name|--gpus|--train-ranks|--gpu-type|--infra|--max-hours|--replica-args|--env-file)
      [ $# -ge 2 ] || die "$1 needs a value (see --help)"
      case "$1" in
        --base-model) BASE_MODEL="$2" ;; --name) NAME="$2" ;; --gpus) GPUS="$2" ;;
        --train-ranks) TRAIN_RANKS="$2" ;; --gpu-type) GPU_TYPE="$2" ;;
        --infra) INFRA="$2" ;; --max-hours) MAX_HOURS="$2" ;; --replica-args) REPLICA_ARGS="$2" ;;
        --env-file) ENV_FILE="$2"; [ -f "$ENV_FILE" ] || die "--env-file '$ENV_FILE' does not exist" ;;
      esac
      shift 2 ;;
    --replica-shares) REPLICA_GPU=shared; shift ;;
    --use-spot) SPOT=1; shift ;;
    --dry-run) DRY_RUN=1; shift ;;
    -y|--yes) YES=1; shift ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

ENV_FILE="$(cd "$(dirname "$ENV_FILE")" 2>/dev/null && pwd)/$(basename "$ENV_FILE")"  # before the cd below
cd "$ROOT"
# The env file fills only what the environment leaves unset: the environment wins, as in the project's settings.
SETTINGS=(ART_STORAGE_ROOT PREFECT_API_URL PREFECT_API_KEY PREFECT_API_AUTH_STRING AWS_ACCESS_KEY_ID
          AWS_SECRET_ACCESS_KEY AWS_ENDPOINT_URL AWS_DEFAULT_REGION ART_INFERENCE_API_KEY ART_BASE_MODEL HF_TOKEN
          WANDB_API_KEY)
if [ -f "$ENV_FILE" ]; then
  while IFS='=' read -r key value; do
    key="${key#export }"
    case " ${SETTINGS[*]} " in *" $key "*) ;; *) continue ;; esac
    if [ -n "${!key:-}" ]; then continue; fi
    value="${value%\"}" value="${value#\"}" value="${value%\'}" value="${value#\'}"
    if [ -n "$value" ]; then export "$key=$value"; fi
  done < <(grep -E '^(export )?[A-Z_][A-Z0-9_]*=' "$ENV_FILE" || true)
  [ -n "$BASE_MODEL" ] || BASE_MODEL="${ART_BASE_MODEL:-}"
fi

# Refuse what would give a node that cannot work, before anything is billed.
[ -n "$BASE_MODEL" ] || die "no base model: give --base-model (the hub id or path your runs train on)"
case "$BASE_MODEL" in
  .*|"~"*) die "--base-model '$BASE_MODEL' is a path on this machine, which the node does not have:" \
             "give a hub id (Qwen/Qwen2.5-7B-Instruct) or an absolute path on the node" ;;
esac
[[ "$NAME" =~ ^[a-z]([-a-z0-9]*[a-z0-9])?$ ]] \
  || die "cluster name '$NAME': use lowercase letters, digits and '-', starting with a letter"
case "${ART_STORAGE_ROOT:-}" in
  "") die "ART_STORAGE_ROOT is not set: the node needs the runs' storage as s3://bucket/prefix" ;;
  s3://?*) ;;
  *) die "ART_STORAGE_ROOT='$ART_STORAGE_ROOT' is not on S3: the node cannot read a local folder;" \
         "use s3://bucket/prefix" ;;
esac
case "${PREFECT_API_URL:-}" in
  "") die "PREFECT_API_URL is not set: the node's worker must reach your Prefect server (e.g. https://host:4200/api)" ;;
  http://127.*|http://localhost*|https://127.*|https://localhost*|http://0.0.0.0*|http://\[::1\]*)
    die "PREFECT_API_URL='$PREFECT_API_URL' is this machine's loopback: give an address the node reaches" ;;
  http://?*|https://?*) ;;
  *) die "PREFECT_API_URL='$PREFECT_API_URL' is not an http(s) URL" ;;
esac
for key in AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY; do
  [ -n "${!key:-}" ] || die "$key is not set: the replica and the worker read adapters and rollouts from S3"
done
[ -n "${ART_INFERENCE_API_KEY:-}" ] \
  || die "ART_INFERENCE_API_KEY is not set: the replica listens on the internet and needs the key your runs send"
if [ -n "$MAX_HOURS" ]; then
  [[ "$MAX_HOURS" =~ ^[1-9][0-9]*$ ]] || die "--max-hours '$MAX_HOURS' is not a whole number of hours"
fi
# --train-ranks N: the node's GPU count follows from N, and the task's run script gives the worker exactly N.
if [ -n "$TRAIN_RANKS" ]; then
  [[ "$TRAIN_RANKS" =~ ^[1-9][0-9]*$ ]] \
    || die "--train-ranks '$TRAIN_RANKS' is not a whole number of GPUs (1 or more): the train steps' train.ranks"
  [ -z "$GPUS" ] || die "--gpus and --train-ranks both set the node's GPUs: give --train-ranks N (and --gpu-type)" \
                         "or --gpus TYPE:COUNT alone"
  GPU_TYPE="${GPU_TYPE:-H100}"
  [[ "$GPU_TYPE" =~ ^[A-Za-z0-9][-A-Za-z0-9_.]*$ ]] \
    || die "--gpu-type '$GPU_TYPE' is not a GPU type such as H100 or A100-80GB (--train-ranks gives the count)"
  if [ "$REPLICA_GPU" = own ]; then GPUS="$GPU_TYPE:$((TRAIN_RANKS + 1))"; else GPUS="$GPU_TYPE:$TRAIN_RANKS"; fi
else
  [ -z "$GPU_TYPE" ] || die "--gpu-type goes with --train-ranks N; without it give --gpus $GPU_TYPE:COUNT"
  [ "$REPLICA_GPU" = own ] || die "--replica-shares goes with --train-ranks N (the GPUs of one train step)"
fi

SKY="${SKY:-}"
if [ -z "$SKY" ]; then
  if [ -x "$ROOT/.venv-sky/bin/sky" ]; then SKY="$ROOT/.venv-sky/bin/sky"
  elif command -v sky >/dev/null 2>&1; then SKY="$(command -v sky)"
  else die "SkyPilot is not installed: run \`make sky\` (it builds .venv-sky)"; fi
fi

export ART_BASE_MODEL="$BASE_MODEL" ART_REPLICA_ARGS="$REPLICA_ARGS" ART_TRAIN_RANKS="$TRAIN_RANKS" \
       ART_REPLICA_GPU="$REPLICA_GPU"
# `--env NAME` / `--secret NAME` take the value from this environment: no secret on the command line.
args=(launch -c "$NAME" "$TASK" -d
      --env ART_STORAGE_ROOT --env PREFECT_API_URL --env ART_BASE_MODEL --env ART_REPLICA_ARGS
      --secret AWS_ACCESS_KEY_ID --secret AWS_SECRET_ACCESS_KEY --secret ART_INFERENCE_API_KEY)
for key in AWS_ENDPOINT_URL AWS_DEFAULT_REGION; do [ -z "${!key:-}" ] || args+=(--env "$key"); done
for key in PREFECT_API_KEY PREFECT_API_AUTH_STRING HF_TOKEN WANDB_API_KEY; do
  [ -z "${!key:-}" ] || args+=(--secret "$key")
done
[ -z "$GPUS" ] || args+=(--gpus "$GPUS")
[ -z "$TRAIN_RANKS" ] || args+=(--env ART_TRAIN_RANKS --env ART_REPLICA_GPU)
[ -z "$INFRA" ] || args+=(--infra "$INFRA")
[ "$SPOT" = 0 ] || args+=(--use-spot)
# --wait-for none: the deadline holds although the worker and the replica keep the job running forever.
[ -z "$MAX_HOURS" ] || args+=(-i "$((MAX_HOURS * 60))" --wait-for none --down)
[ "$DRY_RUN" = 0 ] || args+=(--dryrun)
[ "$YES" = 0 ] || args+=(-y)

"$SKY" "${args[@]}"
[ "$DRY_RUN" = 0 ] || exit 0

ip="$("$SKY" status --ip "$NAME" 2>/dev/null || echo '<sky status --ip '"$NAME"'>')"
steps=""
[ -z "$TRAIN_RANKS" ] || steps="
Each train step gets the worker's $TRAIN_RANKS GPU(s): runs may set train.ranks up to $TRAIN_RANKS."
cat <<EOF

Node '$NAME' is up; the replica loads $BASE_MODEL (minutes) while the worker polls work pool art-gpu.$steps
  replica URL for scale.inference_urls:  http://$ip:$PORT/v1
  follow it:                             sky logs $NAME
  VS Code / ssh:                         ssh $NAME
  stop paying:                           sky down $NAME     (or sky stop $NAME to keep the disk)
EOF
