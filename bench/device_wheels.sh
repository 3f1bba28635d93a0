#!/usr/bin/env bash
# Download, into .whl/ (ignored by git), the wheels that a lent device machine lacks
# for bench/device_run.sh: its image holds torch, Triton, click, rich, sympy, mpmath,
# hypothesis, pytest and pytest-xdist, but not jsonschema (and its own dependencies),
# google-crc32c nor orjson (the shim protocol's JSON lines). setuptools travels too: the
# [[tool.setuptools.ext-modules]] tables of pyproject.toml need setuptools 74.1 or later,
# and the image's version is not known.
#
#   bash bench/device_wheels.sh            # for the device's Python (3.12)
#   bash bench/device_wheels.sh 3.11       # for another Python, e.g. to rehearse here
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:-3.12}"
rm -rf .whl && mkdir -p .whl
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  platforms+=(--platform "$p")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$version" --implementation cp \
  "${platforms[@]}" -d .whl \
  'jsonschema==4.25.1' 'jsonschema-specifications==2025.9.1' 'referencing==0.37.0' 'rpds-py==0.28.0' \
  'google-crc32c==1.9.0' 'orjson==3.13.0' 'setuptools==84.2.1'
ls -l .whl
