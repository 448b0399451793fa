"""Object storage over fsspec: a local folder by default, s3://bucket/prefix through s3fs.

Storage moves bytes: text, JSON, whole directories (written with a COMPLETE marker last). What lives
where under the root (models, checkpoints, trajectories, history) is art_core.store's (ModelStore).

    >>> storage = Storage("/tmp/art")
    >>> storage.write_json(storage.join("demo", "notes.json"), {"ok": True})
    >>> storage.read_json("/tmp/art/demo/notes.json")
    {'ok': True}
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

import fsspec

from art_core.naming import validate_name  # noqa: F401  (re-exported: its home before art_core.naming)

# Written last into a stored directory (put_dir): a directory without it was cut short and does not count.
CHECKPOINT_MARKER = "COMPLETE"


def storage_options_from_env() -> dict[str, Any]:
    """s3fs options from the usual AWS variables; an endpoint URL points at MinIO, moto or another S3."""
    opts: dict[str, Any] = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        opts["endpoint_url"] = endpoint
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        opts["key"] = os.environ["AWS_ACCESS_KEY_ID"]
        opts["secret"] = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    return opts


class Storage:
    """A root URL and its filesystem (fsspec). Everything crossing a process is a URL under this root."""

    def __init__(self, root: str, **storage_options: Any) -> None:
        if not root:
            raise ValueError("storage root is empty: give a local folder or s3://bucket/prefix")
        self.root = root.rstrip("/")
        protocol = fsspec.utils.get_protocol(self.root)
        if protocol == "file":
            self.root = os.path.abspath(os.path.expanduser(self.root.removeprefix("file://")))
        elif protocol == "s3" and not storage_options:
            storage_options = storage_options_from_env()
        self.protocol = protocol
        self.fs: fsspec.AbstractFileSystem = fsspec.filesystem(protocol, **storage_options)
        self.storage_options = storage_options

    def __repr__(self) -> str:
        return f"Storage({self.root!r})"

    @property
    def is_local(self) -> bool:
        return self.protocol == "file"

    # ---- paths -----------------------------------------------------------------------------
    def join(self, *parts: str) -> str:
        """A path under the root; a first part that already is a path under the root is extended."""
        if parts and (parts[0] == self.root or parts[0].startswith(self.root + "/")):
            base, parts = parts[0].rstrip("/"), parts[1:]
        else:
            base = self.root
        return "/".join([base, *[p.strip("/") for p in parts if p]])

    # ---- bytes and text ----------------------------------------------------------------------
    def exists(self, path: str) -> bool:
        return self.fs.exists(path)

    def read_text(self, path: str) -> str:
        with self.fs.open(path, "r") as f:
            return f.read()

    def write_text(self, path: str, text: str) -> None:
        """Write a whole file; on a local disk via a temporary name and a rename, so readers never see half."""
        if self.is_local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.tmp-{os.getpid()}"
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, path)
        else:
            with self.fs.open(path, "w") as f:
                f.write(text)

    def read_json(self, path: str) -> Any:
        return json.loads(self.read_text(path))

    def write_json(self, path: str, obj: Any) -> None:
        self.write_text(path, json.dumps(obj, indent=2, sort_keys=True))

    def append_jsonl(self, path: str, record: dict[str, Any]) -> None:
        """Append one record (read-modify-write on object stores, which cannot append)."""
        old = self.read_text(path) if self.exists(path) else ""
        self.write_text(path, old + json.dumps(record, sort_keys=True) + "\n")

    def read_jsonl(self, path: str) -> list[dict[str, Any]]:
        if not self.exists(path):
            return []
        return [json.loads(line) for line in self.read_text(path).splitlines() if line.strip()]

    # ---- directories (checkpoints) -----------------------------------------------------------------
    def put_dir(self, local_dir: str, path: str) -> None:
        """Copy a local directory's files to `path`, then write the COMPLETE marker last."""
        for dirpath, _, files in os.walk(local_dir):
            for fname in sorted(files):
                if fname == CHECKPOINT_MARKER:
                    continue
                src = os.path.join(dirpath, fname)
                rel = os.path.relpath(src, local_dir).replace(os.sep, "/")
                dst = self.join(path, rel)
                if self.is_local:
                    os.makedirs(os.path.dirname(dst), exist_ok=True)
                self.fs.put_file(src, dst)
        self.write_text(self.join(path, CHECKPOINT_MARKER), "ok\n")

    def get_dir(self, path: str, local_dir: str) -> str:
        """Copy a stored directory to `local_dir` (a local root is returned as it is, without copying)."""
        if self.is_local:
            return path
        os.makedirs(local_dir, exist_ok=True)
        for src in self.fs.find(path):
            rel = src[len(self.fs._strip_protocol(path)) :].lstrip("/")
            dst = os.path.join(local_dir, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            self.fs.get_file(src, dst)
        return local_dir

    def is_complete(self, path: str) -> bool:
        """True once put_dir finished `path` (its COMPLETE marker is written)."""
        return self.exists(self.join(path, CHECKPOINT_MARKER))

    def delete(self, path: str) -> None:
        if self.exists(path):
            self.fs.rm(path, recursive=True)


def copy_tree(
    src: Storage, src_dir: str, dst: Storage, dst_dir: str, keep: Callable[[str], bool] = lambda rel: True
) -> set[str]:
    """Copy the files under `src_dir` whose path relative to it `keep` accepts to `dst_dir` (each storage through
    its own fsspec filesystem, so local to S3 and back); returns those relative paths.

    Checkpoint markers go last: a copy cut short leaves incomplete checkpoints, which every reader ignores."""
    src_dir, dst_dir = src_dir.rstrip("/"), dst_dir.rstrip("/")
    base = src.fs._strip_protocol(src_dir).rstrip("/")
    files = [(f, f[len(base) :].lstrip("/")) for f in src.fs.find(src_dir)]
    files = sorted(
        ((f, rel) for f, rel in files if keep(rel)), key=lambda p: p[1].rsplit("/", 1)[-1] == CHECKPOINT_MARKER
    )
    for f, rel in files:
        target = dst.join(dst_dir, rel)
        dst.fs.makedirs(dst.fs._parent(target), exist_ok=True)
        with src.fs.open(f, "rb") as fin, dst.fs.open(target, "wb") as fout:
            fout.write(fin.read())
    return {rel for _, rel in files}
