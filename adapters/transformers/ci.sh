#!/usr/bin/env bash
# CI stage: Hugging Face transformers' _speculative_sampling against the corpus
# (docs/engines/transformers.md, "In CI"). Runs after the main suite and apart from it.
# Exits non-zero when
#   * the environment cannot be made,
#   * the released function stops matching expectations/transformers.toml (the zero-target
#     case listed there as a bug turning xpass fails the run: a release that fixes it shows),
#   * the strict comparison (the proposed fix) fails a valid case, or its law fails in stat.
# Its JSON reports go to reports/engines/transformers-<version>/ for the matrix
# (docs/engines/README.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
began=$SECONDS
Q=.venv/bin/qconform
VERSION="${QCONFORM_TRANSFORMERS_VERSION:-5.23.0}"
export QCONFORM_TRANSFORMERS_VERSION="$VERSION"
OUT="${QCONFORM_ENGINE_REPORTS:-reports/engines}/transformers-$VERSION"
rm -rf "$OUT" && mkdir -p "$OUT"
BATCH=(--timeout 300)

bash adapters/transformers/install.sh

imported=$SECONDS
.venv-transformers/bin/python -c "import transformers.generation.utils" 2>/dev/null
echo "transformers stage: transformers $VERSION imported in $((SECONDS - imported)) s"

# 1. as released, partial injection, with expectations/transformers.toml (one valid case listed: the bug)
$Q run "${BATCH[@]}" --adapter transformers --family verification_round --json "$OUT/run-transformers.json"

# 2. the proposed fix (r_i < p_i/q_i) passes every valid case with no expectations at all
$Q run "${BATCH[@]}" --adapter transformers:strict-accept --family verification_round -k "not INVALID_REQUEST and not REFUSAL_PRECEDENCE" \
    --expectations /dev/null --json "$OUT/run-transformers-strict-accept.json"

# 3. statistical mode: every draw the library's own (torch's global generator)
$Q stat --adapter transformers --samples 2000 --case 'verification_round/residual/*' \
    --case 'verification_round/full_acceptance/*' \
    --json "$OUT/stat-transformers.json"
echo "transformers stage: $((SECONDS - began)) s"
