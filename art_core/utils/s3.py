"""ART's `art.utils.s3` helpers: not provided as functions. The same backup and restore are LocalBackend's
`_experimental_push_to_s3` / `_experimental_pull_from_s3` (ART's layout, s3fs instead of the aws CLI), and any
storage root may itself be s3:// (LocalBackend(path="s3://bucket/prefix"))."""

from art_core._unavailable import refuse_all

__getattr__ = refuse_all(
    __name__,
    "use LocalBackend._experimental_push_to_s3 / _experimental_pull_from_s3, or LocalBackend(path='s3://...')",
)
