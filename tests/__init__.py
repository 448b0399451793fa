"""Tests (a package, so `tests` resolves here even where a dependency installs a top-level `tests`, as weave -> polyfile-weave -> cint does)."""
