# Sourced by bench/device_run.sh and bench/device_ranks.sh on a lent device machine: install this
# checkout into the machine's Python (its torch and Triton), with the wheels of
# bench/device_wheels.sh first on the path, and check that what the harness imports is there.
# It exports PYTHONPATH for the caller; it exits the caller with 2 when the install is incomplete.
if compgen -G '.whl/*.whl' >/dev/null; then   # wheels from bench/device_wheels.sh
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/qconform-site .whl/*.whl
  export PYTHONPATH="/tmp/qconform-site${PYTHONPATH:+:$PYTHONPATH}"
fi
# installed already from this very checkout (bench/device_run.sh earlier in the same warm machine): kept.
# Both checks run from / : from the checkout, its own qconform/ folder would import without any install.
here="$PWD"
if ! (cd / && python3 -c "import sys, qconform; sys.exit(not qconform.__file__.startswith('$here/'))") 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-build-isolation -e .
fi
(cd / && python3 -c 'import jsonschema, google_crc32c, orjson, qconform.harness.transport.shim_protocol') ||
  { echo "device: the install is incomplete (see above)"; exit 2; }
