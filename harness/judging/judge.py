"""Judging one case's outcome: ``judge(case, outcome, config) -> Verdict``.

The order of the checks is the contract (docs/harness.md):

1. a family the adapter does not declare is ``unsupported`` (the adapter is never
   asked), as is an ``Unimplemented`` outcome; an ``AdapterError`` is ``error``;
2. the case's ``result`` is read *first* (Wycheproof's lesson): an ``invalid``
   case passes only with ``{"error": <the expected code>}``; any other code, or
   a normal output, is ``fail``. A ``valid`` case answered with a refusal is
   ``fail``. An ``acceptable`` case passes with its expected output or with any
   refusal (its flags document why both are allowed);
3. an output is compared with ``expected`` exactly, after decoding, by the
   family's comparator (the module its ``Family.comparator`` names under
   ``qconform.harness.judging``), which alone may classify a divergence as
   ``precision``; other families use exact equality;
4. an answer that does not have the structure of ``expected`` (wrong or missing
   fields, wrong blob dtype or shape, NaN) is ``error``: the adapter answered
   garbage.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from fractions import Fraction
from types import ModuleType
from typing import Any, Callable

from qconform.generators.encoding import decode_rational
from qconform.harness.adapter import AdapterConfig, AdapterError, Outcome, PrecisionProfile, Unimplemented
from qconform.harness.judging.value_diff import Malformed, first_difference
from qconform.harness.verdicts import Diff, Verdict, errored, failed, passed, precision, unsupported

#: ``comparator(case, output, profile) -> Verdict`` for a valid case's output.
Comparator = Callable[[dict, dict, PrecisionProfile], Verdict]

#: An output for an invalid case is shown as this in a diff.
AN_OUTPUT = "<an output>"


def case_family(case: dict) -> str:
    return case.get("family") or case["id"].split("/", 1)[0]


def compare_exact(case: dict, output: dict, profile: PrecisionProfile) -> Verdict:
    """Exact equality of the decoded output with ``expected``; no precision class."""
    diff = first_difference(case["expected"], output)
    if diff is None:
        return passed(case["id"])
    return failed(case["id"], f"output differs at {diff}", diff)


def refusal_code(output: dict) -> str | None:
    """The code of a refusal ``{"error": CODE}``; None for a normal output."""
    if "error" not in output:
        return None
    code = output["error"]
    if set(output) != {"error"} or not isinstance(code, str) or not code:
        raise Malformed("error", f"a refusal must be exactly {{'error': CODE}}, got keys {sorted(output)}")
    return code


def judge_invalid(case: dict, output: dict) -> Verdict:
    want = case["expected"]["error"]
    code = refusal_code(output)
    if code is None:
        return failed(
            case["id"],
            f"answered an output for an invalid input; expected refusal {want}",
            Diff("error", want, AN_OUTPUT),
        )
    if code != want:
        return failed(case["id"], f"refused with {code}, expected {want}", Diff("error", want, code))
    return passed(case["id"], f"refused with {code}")


def judge_output(case: dict, output: dict, profile: PrecisionProfile) -> Verdict:
    code = refusal_code(output)
    if code is not None and case["result"] == "acceptable":
        flags = ", ".join(case.get("flags", ())) or "none"
        return passed(case["id"], f"refused an acceptable case with {code} (flags: {flags})")
    module = family_module(case_family(case))
    if code is not None:
        diff = Diff("error", AN_OUTPUT, code)
        excuse = getattr(module, "refusal_excuse", None)
        reason = excuse(case, code, profile) if excuse is not None else None
        if reason is not None:
            return precision(case["id"], f"refused with {code} within declared margins: {reason}", diff)
        return failed(case["id"], f"refused a valid case with {code}", diff)
    comparator: Comparator = compare_exact if module is None else module.compare
    return comparator(case, output, profile)


def judge(case: dict, outcome: Outcome | Any, config: AdapterConfig) -> Verdict:
    """The verdict on ``case`` (a vector-file case object) given the adapter's ``outcome``."""
    case_id, family = case["id"], case_family(case)
    if family not in config.capabilities.families:
        return unsupported(case_id, f"adapter {config.name} does not declare family {family}")
    if isinstance(outcome, Unimplemented):
        return unsupported(case_id, outcome.reason or f"adapter {config.name} reports it unimplemented")
    if isinstance(outcome, AdapterError):
        return errored(case_id, outcome.message)
    if not isinstance(outcome, dict):
        return errored(case_id, f"malformed answer: a {type(outcome).__name__}, not an object")
    try:
        if case["result"] == "invalid":
            return judge_invalid(case, outcome)
        injected = config.capabilities.domains_of(family)
        if injected is not None:
            return judge_partial(case, outcome, config, injected)
        return judge_output(case, outcome, config.precision)
    except Malformed as exc:
        return errored(case_id, f"malformed answer: {exc}")
    except UNREADABLE as exc:
        # A comparator reads only the keys, dtypes and shapes it compares (docs/harness.md,
        # "Structure-only validation"), so an answer of another shape can stop it anywhere. Name
        # what is wrong with the answer from the family's full schema; a schema-valid answer
        # that still breaks a comparator is a bug of the judge, and it propagates.
        problem = answer_problem(family, outcome)
        if problem is None:
            raise
        return errored(case_id, f"malformed answer: {problem} ({type(exc).__name__} in the comparator)")


#: what reading a malformed answer can raise inside a comparator (a wrong type, a missing key,
#: a short list, bad base64 or an impossible rational), as opposed to ``Malformed``
UNREADABLE = (TypeError, ValueError, KeyError, IndexError, AttributeError, ArithmeticError)


def answer_problem(family: str, output: dict) -> str | None:
    """Why ``output`` is not a well-formed answer of ``family`` (its blobs, then its full
    schema or a refusal's), or None."""
    from qconform.harness.transport.shim_protocol import check_output

    try:
        return check_output(family, output, strict_schema=True)
    except UNREADABLE as exc:  # a blob field of the wrong type stops the blob check itself
        return f"not an answer of the {family} format ({type(exc).__name__}: {exc})"


#: the package of the comparator modules a :class:`~qconform.generators.registry.Family` names
JUDGING_PACKAGE = "qconform.harness.judging"


def family_module(family: str) -> ModuleType | None:
    """The comparator module of ``family`` (imported on first use: it imports this module);
    None for a family compared exactly, or one the registry does not know."""
    from qconform.generators.registry import load_family

    try:
        name = load_family(family).comparator
    except KeyError:
        return None
    if name is None:
        return None
    qualified = f"{JUDGING_PACKAGE}.{name}"
    # the module once imported, without import_module's machinery: this runs for every case judged
    module = sys.modules.get(qualified)
    return module if module is not None else importlib.import_module(qualified)


@dataclass(frozen=True)
class PartialMode:
    """A family's partial-injection mode (docs/harness.md, "Partial injection"): the RNG ABI
    domains it draws in, in draw order, and the one an adapter must take injected."""

    domains: tuple[str, ...]
    required: str


def partial_mode(family: str) -> PartialMode | None:
    """The partial-injection mode of ``family``'s comparator module, if it has one
    (``PARTIAL_MODE`` beside a ``compare_partial(case, output, profile, injected)``)."""
    module = family_module(family)
    return None if module is None else getattr(module, "PARTIAL_MODE", None)


def judge_partial(case: dict, output: dict, config: AdapterConfig, injected: tuple[str, ...]) -> Verdict:
    """A valid case of a family the adapter takes only partly injected: refusals as in
    :func:`judge_output`, outputs by the comparator's ``compare_partial``."""
    if refusal_code(output) is not None:
        return judge_output(case, output, config.precision)
    module = family_module(case_family(case))
    assert module is not None  # a partly injected family has a PARTIAL_MODE, so a comparator module
    return module.compare_partial(case, output, config.precision, injected)


def profile_margin(profile: PrecisionProfile, name: str) -> Fraction:
    """One of the profile's declared margins as an exact rational."""
    return decode_rational(getattr(profile, name))
