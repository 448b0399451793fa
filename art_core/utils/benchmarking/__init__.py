"""ART's `art.utils.benchmarking` (charts and tables over its Parquet trajectory logs): not available here.

ART reads `trajectories/{split}/{step}.parquet` with polars; art_core writes JSONL (`art_core.store.ModelStore`
reads it back) and history.jsonl, and the evaluate flow draws its comparison as a Prefect artifact. Any name
taken from these modules raises NotImplementedError saying so.
"""

from art_core._unavailable import refuse_all

WHY = (
    "ART's benchmarking helpers read its Parquet trajectory logs; art_core stores JSONL: read it with "
    "art_core.store.ModelStore(...).read_groups, or compare steps with the evaluate flow (docs/art-compatibility.md)"
)
__getattr__ = refuse_all(__name__, WHY)
