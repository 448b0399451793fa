"""Deploy a step's LoRA adapter to Together's serverless LoRA inference, through Together's Python SDK.

Together's upload API (`POST /v1/models`, SDK `client.models.upload`) fetches the adapter itself from a
URL: a Hugging Face repo or a presigned S3 URL to an archive with adapter_config.json and
adapter_model.safetensors at its root. So the export is archived to S3 (the storage root when it is
s3://, else `upload_to`), presigned for 6 hours (Together asks for at least 100 minutes), and handed
over; the upload job is then polled (`GET /v1/jobs/{id}`, SDK `client.models.uploads.status`) until it
is Complete or Failed, and a complete model is looked up in `GET /v1/models` (SDK `client.models.list`).

    d = await deploy_model("together", model, step=3, base_model="Qwen/Qwen2.5-72B-Instruct", upload_to="s3://b/p")
    d.model_name   # 'you/demo-agent-001-3', answered at d.endpoint ('https://api.together.ai/v1')

TOGETHER_API_KEY is read from the environment unless given; TOGETHER_BASE_URL (read by the SDK) points
it elsewhere (the tests' local server). The v1 upload API is the one the SDK's 2.x line calls; the 3.x
line moved to project-scoped `/v2/projects/{id}/models` uploads, not covered here.
"""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
import tempfile
import time


from art_core.deploy.result import Deployment, DeployError, refuse_unserved_base, require_sdk
from art_core.storage import CHECKPOINT_MARKER, Storage
from art_core.store import step_dir

# Base models whose adapters Together serves serverless (docs.together.ai "Upload a LoRA adapter",
# "Supported base models"); pass the base's Together name as deploy_model(base_model=...).
SUPPORTED_BASE_MODELS = (
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
    "meta-llama/Meta-Llama-3.1-8B-Instruct-Reference",
    "meta-llama/Meta-Llama-3.1-70B-Instruct-Reference",
    "Qwen/Qwen2.5-72B-Instruct",
    "Qwen/Qwen3-235B-A22B-Instruct-2507-tput",
)
DEFAULT_BASE_URL = "https://api.together.ai/v1"
PRESIGN_SECONDS = 6 * 3600
REQUIRED_FILES = ("adapter_config.json", "adapter_model.safetensors")
_STATUS = {
    "Queued": "queued",
    "Retry Queued": "queued",
    "Running": "running",
    "Complete": "ready",
    "Failed": "failed",
    "Error": "failed",
    "Bad": "failed",
}


def preflight(base_model: str, api_key: str | None, storage: Storage, upload_to: str | None) -> str:
    """Refuse what Together would refuse, before anything is uploaded; returns the API key."""
    refuse_unserved_base("Together", base_model, SUPPORTED_BASE_MODELS)
    key = api_key or os.environ.get("TOGETHER_API_KEY")
    if not key:
        raise DeployError(
            "TOGETHER_API_KEY is not set: export it (or store it in the Prefect Secret block the "
            "deploy flow names) before deploying to Together"
        )
    if not storage.root.startswith("s3://") and not (upload_to or "").startswith("s3://"):
        raise DeployError(
            f"Together downloads the adapter from a URL, and storage {storage.root} is a local folder: "
            "pass upload_to='s3://bucket/prefix' (or use an s3:// storage root) for the archive"
        )
    require_sdk("together", "the Together SDK")
    return key


def together_name(project: str, name: str, step: int) -> str:
    """The adapter's name at Together (ART's `{project}-{name}-{step}`)."""
    return f"{project}-{name}-{step}"


def archive(storage: Storage, export_uri: str) -> bytes:
    """A .tar.gz of the export's files at the archive's root (Together rejects a nested folder)."""
    with tempfile.TemporaryDirectory(prefix="art-together-") as tmp:
        local = storage.get_dir(export_uri, os.path.join(tmp, "export"))
        names = sorted(
            f for f in os.listdir(local) if os.path.isfile(os.path.join(local, f)) and f != CHECKPOINT_MARKER
        )
        missing = [f for f in REQUIRED_FILES if f not in names]
        if missing:
            raise DeployError(f"the export at {export_uri} lacks {', '.join(missing)}, which Together requires")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for f in names:
                tar.add(os.path.join(local, f), arcname=f)
        return buf.getvalue()


def _put_archive(
    storage: Storage, export_uri: str, data: bytes, project: str, name: str, step: int, upload_to: str | None
) -> tuple[str, str]:
    """Write the archive to S3 and presign it; returns (its s3:// URI, the presigned https URL)."""
    if upload_to:
        target = Storage(upload_to)
        uri = target.join(project, name, "exports", f"{step_dir(step)}.tar.gz")
    else:
        target, uri = storage, f"{export_uri.rstrip('/')}.tar.gz"
    with target.fs.open(uri, "wb") as f:
        f.write(data)
    return uri, target.fs.sign(uri, expiration=PRESIGN_SECONDS)


async def deploy(
    storage: Storage,
    project: str,
    name: str,
    step: int,
    base_model: str,
    export_uri: str,
    api_key: str,
    *,
    upload_to: str | None = None,
    wait: bool = True,
    poll_interval_s: float = 15.0,
    timeout_s: float = 900.0,
    verbose: bool = False,
) -> Deployment:
    """Archive, upload, poll; returns the deployment (ready, or queued/running when not waiting)."""
    from together import AsyncTogether

    data = await asyncio.to_thread(archive, storage, export_uri)
    archive_uri, url = await asyncio.to_thread(_put_archive, storage, export_uri, data, project, name, step, upload_to)
    kept = f"The adapter export is intact at {export_uri} (archive {archive_uri})"
    client = AsyncTogether(api_key=api_key)
    endpoint = str(client.base_url).rstrip("/")
    model_name = together_name(project, name, step)
    try:
        upload = await client.models.upload(
            model_name=model_name,
            model_source=url,
            model_type="adapter",
            base_model=base_model,
            description=f"Deployed from art-pipeline. Project: {project}. Model: {name}. Step: {step}.",
        )
    except Exception as e:  # the SDK's errors name the status and body, never the key
        await client.close()
        raise DeployError(f"Together refused the upload of {model_name}: {e}. {kept}.") from e
    job_id = upload.data.job_id
    served = getattr(upload.data, "x_model_name", None) or model_name
    if verbose:
        print(f"Together upload job {job_id} for {served}: {upload.message}")
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            job = await client.models.uploads.status(job_id)
            status = _STATUS.get(job.status, "running")
            if verbose:
                print(f"Together job {job_id}: {job.status}")
            if status == "failed":
                reason = job.status_updates[-1].message if job.status_updates else None
                raise DeployError(f"Together job {job_id} for {served} failed: {reason or job.status}. {kept}.")
            if status == "ready" and any(m.id == served for m in await client.models.list()):
                return Deployment(
                    target="together",
                    step=step,
                    model_name=served,
                    endpoint=endpoint,
                    status="ready",
                    export_uri=export_uri,
                    uri=archive_uri,
                    job_id=job_id,
                    message=f"Together serves {served} at {endpoint}",
                )
            if not wait:
                return Deployment(
                    target="together",
                    step=step,
                    model_name=served,
                    endpoint=endpoint,
                    status="running" if status == "ready" else status,
                    export_uri=export_uri,
                    uri=archive_uri,
                    job_id=job_id,
                    message=f"Together job {job_id} is {job.status}; poll it, or deploy again with "
                    "wait_for_completion=True",
                )
            if time.monotonic() > deadline:
                raise DeployError(
                    f"Together job {job_id} for {served} is still {job.status} after {timeout_s:.0f} s. {kept}."
                )
            await asyncio.sleep(poll_interval_s)
    except DeployError:
        raise
    except Exception as e:
        raise DeployError(f"polling Together job {job_id} for {served} failed: {e}. {kept}.") from e
    finally:
        await client.close()
