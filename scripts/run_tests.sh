#!/usr/bin/env bash
# Run the test suite from the project's .venv. pytest's exit code 5 ("no tests collected") is a failure:
# a suite that silently runs nothing must not pass.
set -u
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing on purpose" >&2
  exit 1
fi
exit "$rc"
