#!/usr/bin/env bash
# Run the test suite from the project's .venv. pytest's exit code 5 ("no tests collected") is a failure:
# a suite that silently runs nothing must not pass.
set -u
cd "$(dirname "$0")/.."
# Two workers (pytest-xdist), a test file per worker at a time: much of the suite waits on vLLM and Prefect
# servers starting and answering, so two files at once use the 2 cores that one leaves idle.
# PYTEST_WORKERS=0 runs in one process. Each worker's torch (the trainer) gets one thread: two workers
# with two threads each, next to the vLLM servers, oversubscribe the 2 cores and a 14 s trainer test took 366 s.
if [ "${PYTEST_WORKERS:-2}" != "0" ]; then
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
fi
# --no-loadscope-reorder keeps the conftest's order (longest files first); xdist's default re-sorts by test count.
.venv/bin/python -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing on purpose" >&2
  exit 1
fi
exit "$rc"
