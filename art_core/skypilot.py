"""ART's `art.skypilot` (SkyPilotBackend): not a backend here. ART PR #541 made SkyPilot a launcher; so is it
here: `scripts/launch-cluster.sh` brings up a GPU node that runs LocalBackend or the Prefect worker
(docs/clusters.md). Any name taken from this module raises NotImplementedError saying so."""

from art_core._unavailable import refuse_all

WHY = (
    "SkyPilot is a launcher here, not a backend: start a GPU node with scripts/launch-cluster.sh and train "
    "there with LocalBackend or the Prefect train flow (docs/clusters.md)"
)
__getattr__ = refuse_all(__name__, WHY)
