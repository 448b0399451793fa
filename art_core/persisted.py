"""Models that outlive the code that wrote them: Prefect's result cache keeps task results pickled.

A cached result pickled before a field was added comes back without that field: pickle restores the old
attributes and pydantic does not validate them, so the first `model_dump` after an upgrade fails on the missing
attribute (a cached airline evaluation did, after `CategoryScore.ids` was added). A `Persisted` model reads such a
pickle back with the new field's default.

    class GatherOutcome(Persisted):      # what a cached Prefect task returns
        step: int
        seconds: float = 0.0             # a field added later: give it a default

Every pydantic model a persisted Prefect task returns derives from it (tests/pipeline/test_persisted_results.py
checks the tasks).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class Persisted(BaseModel):
    """A pydantic model whose pickles from before a field was added read back with that field's default."""

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state)
        for name, field in type(self).model_fields.items():
            if name not in self.__dict__:
                self.__dict__[name] = field.get_default(call_default_factory=True)
