"""ART's `art.utils.deployment`: `deploy_model` (art_core.deploy). ART's per-target config classes are
`deploy_model` keywords here; taking one of them raises NotImplementedError saying so."""

from art_core._unavailable import refuse_all
from art_core.deploy import deploy_model

__all__ = ["deploy_model"]
__getattr__ = refuse_all(
    __name__,
    "ART's deployment config classes are keywords of art_core.deploy.deploy_model here "
    "(deploy_to=, upload_to=, wait_for_completion=; docs/art-compatibility.md)",
)
