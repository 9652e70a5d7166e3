#!/usr/bin/env bash
# Create or update .venv/ with everything the package needs, then build and install the package itself
# (messages included). Idempotent and cheap when nothing changed: it reinstalls only when a requirements
# file, setup.py or package.xml changed since the last successful run.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
VENV=.venv
STAMP="$VENV/.bootstrap-stamp"
want="$(cat requirements/*.txt setup.py package.xml | sha256sum | cut -d' ' -f1)"

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "bootstrap: creating $VENV with $("$PYTHON" --version)" >&2
  "$PYTHON" -m venv "$VENV"
fi
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$want" ]]; then
  echo "bootstrap: installing pinned requirements (first time: a few minutes)" >&2
  # ros.txt first: the message build step needs its generators, wheel and catkin_pkg in the venv.
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r requirements/ros.txt
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r requirements/base.txt -r requirements/dev.txt \
    -r requirements/cmake.txt
  # --no-build-isolation: the message build compiles against this venv's ROS wheels.
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-build-isolation --no-deps -e .
  rm -f "$STAMP"
fi
# Messages: rebuilt only when msg/ or package.xml changed; --install lays the libraries, interface files,
# launch/config files and node executables under the venv prefix (an editable install skips data files).
"$VENV/bin/python" tools/build_interfaces.py --install >/dev/null
echo "$want" > "$STAMP"
