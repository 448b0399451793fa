"""`art_core.local.backend`: ART's module path for `LocalBackend` (implemented in art_core.local_backend).

from art_core.local.backend import LocalBackend
"""

from art_core.local_backend import LocalBackend

__all__ = ["LocalBackend"]
