"""`art_core.local`: where ART users import the local backend from (`from art.local import LocalBackend`).

    from art_core.local import LocalBackend
    backend = LocalBackend(path="./.art")

The backend itself lives in art_core.local_backend; this package only re-exports it under ART's path.
"""

from art_core.local.backend import LocalBackend

__all__ = ["LocalBackend"]
