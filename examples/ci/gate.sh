#!/usr/bin/env bash
# The qconform release gate of an engine's repository, as plain shell (docs/ci.md).
#
# It installs qconform pinned to a version, runs the engine's adapter against the corpus
# pinned by its root hash, with the engine's expectations file, writes the JUnit, JSON and
# HTML reports, and exits non-zero on any unexpected result (fail, error, xpass, a stale
# expectations entry, an incomplete run), on a corpus whose root is not the pinned one, and
# on a required family the adapter does not support. Every setting is an environment
# variable; the required ones have no default:
#
#   QCONFORM_ADAPTER       the engine under test, e.g. "shim:/abs/path/to/engine_shim" (required)
#   QCONFORM_CORPUS_ROOT   the corpus root hash the gate is pinned to (required; `index.json` "root")
#   QCONFORM_REQUIRE       families that must be run and supported, space-separated (required)
#   QCONFORM_PIP_SPEC      the qconform to install (required unless QCONFORM_BIN is set): the wheel built from a
#                          checkout pinned to a commit (`pip wheel --no-deps -w dist third_party/qconform`, with
#                          third_party/qconform a submodule, whose commit is the pin, or a clone:
#                          dist/qconform-0.1.0-*.whl), or a pip VCS URL pinned to that commit
#                          (git+file://$PWD/third_party/qconform@$(git -C third_party/qconform rev-parse HEAD)). Once
#                          qconform is published on a package index: QCONFORM_PIP_SPEC="qconform==$QCONFORM_VERSION"
#   QCONFORM_BIN           an installed qconform to use instead of installing one (its version is still checked)
#   QCONFORM_VERSION       the qconform version to insist on (default 0.1.0)
#   QCONFORM_PYTHON        the interpreter of the gate's virtual environment (default python3.11)
#   QCONFORM_EXPECTATIONS  the expectations file (default qconform-expectations.toml, if it exists)
#   QCONFORM_FAMILIES      only these families (space-separated; default: every family of the corpus)
#   QCONFORM_DEVICE        the device (default cpu)
#   QCONFORM_REPORTS       where the reports go (default reports/qconform)
#
# Exit status: qconform's (docs/harness.md, "Exit codes"), or 2 for a gate misconfiguration (a required
# variable unset, another qconform version, a named expectations file that does not exist, an install that fails).
set -euo pipefail

die() { echo "gate: $*" >&2; exit 2; }
required() { [[ -n "${!1:-}" ]] || die "set $1 to $2"; }

required QCONFORM_ADAPTER "the engine under test, e.g. shim:/abs/path/engine_shim"
required QCONFORM_CORPUS_ROOT "the pinned corpus root hash"
required QCONFORM_REQUIRE "the families the engine must run and support"
[[ -n "${QCONFORM_BIN:-}" ]] || required QCONFORM_PIP_SPEC "the qconform to install: the wheel built from its pinned checkout, or git+file://CHECKOUT@COMMIT"
version="${QCONFORM_VERSION:-0.1.0}"
reports="${QCONFORM_REPORTS:-reports/qconform}"
expectations="${QCONFORM_EXPECTATIONS:-qconform-expectations.toml}"

if [[ -n "${QCONFORM_BIN:-}" ]]; then
    qconform="$QCONFORM_BIN"
else
    venv="${QCONFORM_VENV:-.qconform-venv}"
    "${QCONFORM_PYTHON:-python3.11}" -m venv "$venv" || die "cannot create the virtual environment $venv"
    # shellcheck disable=SC2086  # a wheel's glob (dist/qconform-0.1.0-*.whl) is expanded here
    "$venv/bin/pip" install --quiet $QCONFORM_PIP_SPEC || die "cannot install $QCONFORM_PIP_SPEC"
    qconform="$venv/bin/qconform"
fi
installed="$("$qconform" --version)" || die "cannot run $qconform"
[[ "$installed" == "qconform, version $version" ]] || die "installed $installed, the gate is pinned to $version"

args=(run --adapter "$QCONFORM_ADAPTER" --device "${QCONFORM_DEVICE:-cpu}"
      --corpus-root "$QCONFORM_CORPUS_ROOT"
      --json "$reports/qconform.json" --junit "$reports/junit.xml" --html "$reports/qconform.html")
for family in $QCONFORM_REQUIRE; do args+=(--require "$family"); done
for family in ${QCONFORM_FAMILIES:-}; do args+=(--family "$family"); done
if [[ -f "$expectations" ]]; then
    args+=(--expectations "$expectations")
elif [[ -n "${QCONFORM_EXPECTATIONS:-}" ]]; then
    die "expectations file $expectations does not exist"
fi

mkdir -p "$reports"
status=0
"$qconform" "${args[@]}" || status=$?
echo "gate: qconform exited $status; reports in $reports (qconform.json, junit.xml, qconform.html)"
exit "$status"
