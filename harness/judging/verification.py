"""Comparator of ``verification_round``: draw for draw, with the acceptance/residual precision class.

For each request, the answer's draws are compared with the expected draws in
order. A draw is keyed by (domain, position, draw_counter) and carries ``u32``:
any difference there is an RNG-ABI error and always ``fail``. At the first draw
whose decision or token differs, the divergence is ``precision`` only when

* it is an acceptance test (expected ``accept``/``reject``, answered the other
  one for the same token) and the case's recorded ``margin`` for that draw is
  below the profile's ``ratio_margin``, or
* it is a correction or bonus draw (same decision, another token) and the
  case's margin is below the profile's ``residual_margin``,

and the answer is consistent with its own draws (its accepted count is its run
of leading ``accept`` decisions, it emits those drafts and then the token of its
correction or bonus draw, if any). Everything after the divergent draw follows
from it and is not compared. Any other difference is ``fail``.

Malformed answers are ``error``: a wrong number of requests, a missing or
mistyped field. More than ``K + 1`` emitted tokens or draws is a well-formed
wrong answer (flashinfer #879), so ``fail``, as is a token outside the vocabulary.
A draw's own ``margin``, if the adapter sends one, is not compared: the margin
that counts is the case's.
"""

from __future__ import annotations

from qconform.generators.encoding import decode_rational
from qconform.harness.adapter import PrecisionProfile
from qconform.harness.judging.judge import profile_margin
from qconform.harness.judging.value_diff import Malformed, first_difference
from qconform.harness.verdicts import Diff, Verdict, brief, failed, passed, precision

KEY_FIELDS = ("domain", "position", "draw_counter", "u32")
DECISION_FIELDS = ("decision", "token")
INT_FIELDS = ("position", "draw_counter", "u32", "token")
ACCEPTANCE = ("accept", "reject")
FINAL = ("correction", "bonus")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_request(got: object, path: str, depth: int) -> dict:
    """The answered request object if it is well-formed, else :class:`Malformed`."""
    if not isinstance(got, dict) or not {"accepted", "emitted", "draws"} <= set(got) or len(got) != 3:
        raise Malformed(path, "a request answer must be exactly {accepted, emitted, draws}")
    if not _is_int(got["accepted"]) or not 0 <= got["accepted"] <= depth:
        raise Malformed(f"{path}.accepted", f"{got['accepted']!r} is not a count in 0..{depth}")
    emitted, draws = got["emitted"], got["draws"]
    if not isinstance(emitted, list) or not all(_is_int(t) for t in emitted):
        raise Malformed(f"{path}.emitted", "must be a list of integer token ids")
    if not isinstance(draws, list):
        raise Malformed(f"{path}.draws", "must be a list of draws")
    for i, draw in enumerate(draws):
        fields = set(KEY_FIELDS + DECISION_FIELDS)
        if not isinstance(draw, dict) or not fields <= set(draw) <= fields | {"margin"}:
            raise Malformed(f"{path}.draws[{i}]", f"a draw has exactly the fields {sorted(fields)} (and margin)")
        if not all(_is_int(draw[f]) for f in INT_FIELDS) or not isinstance(draw["decision"], str):
            raise Malformed(f"{path}.draws[{i}]", "position, draw_counter, u32 and token must be integers")
    return got


def too_many(got: dict, path: str, depth: int) -> Diff | None:
    """More than ``K + 1`` emitted tokens or draws: a well-formed but wrong answer
    (flashinfer #879), so a ``fail``, not an ``error``."""
    for field in ("emitted", "draws"):
        if len(got[field]) > depth + 1:
            return Diff(f"len({path}.{field})", f"at most K + 1 = {depth + 1}", str(len(got[field])))
    return None


def out_of_range(got: dict, path: str, vocab: int) -> Diff | None:
    """The first emitted or drawn token outside the vocabulary."""
    tokens = [(f"{path}.emitted[{i}]", t) for i, t in enumerate(got["emitted"])]
    tokens += [(f"{path}.draws[{i}].token", d["token"]) for i, d in enumerate(got["draws"])]
    for where, token in tokens:
        if not 0 <= token < vocab:
            return Diff(where, f"a token id in 0..{vocab - 1}", str(token))
    return None


def inconsistency(got: dict, drafts: list[int]) -> str | None:
    """Why the answer's accepted count and emitted tokens do not follow from its own draws."""
    decisions = [d["decision"] for d in got["draws"]]
    leading = next((i for i, d in enumerate(decisions) if d != "accept"), len(decisions))
    if got["accepted"] != leading:
        return f"accepted {got['accepted']} but its draws accept {leading} drafts"
    emitted = got["emitted"]
    if emitted[:leading] != drafts[:leading]:
        return "its emitted tokens do not start with the drafts it accepted"
    finals = [d for d in got["draws"] if d["decision"] in FINAL]
    want = leading + (1 if finals else 0)
    if len(emitted) != want or (finals and emitted[-1] != finals[-1]["token"]):
        return "its emitted tokens do not end with its correction or bonus draw"
    return None


def precision_reason(want: dict, got: dict, profile: PrecisionProfile) -> str | None:
    """Why a divergent decision/token at one draw lies inside the declared margins, if it does."""
    margin = decode_rational(want["margin"])
    if want["decision"] in ACCEPTANCE and got["decision"] in ACCEPTANCE and want["token"] == got["token"]:
        limit, name = profile_margin(profile, "ratio_margin"), "ratio_margin"
    elif want["decision"] in FINAL and got["decision"] == want["decision"]:
        limit, name = profile_margin(profile, "residual_margin"), "residual_margin"
    else:
        return None
    if margin < limit:
        return f"case margin {brief(margin)} < profile {name} {brief(limit)}"
    return None


def _show(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def request_divergence(want: dict, got: dict, drafts: list[int], path: str,
                       profile: PrecisionProfile) -> tuple[Diff, str | None] | None:
    """(first difference, precision reason or None) of one request; None when equal."""
    for i, (w, g) in enumerate(zip(want["draws"], got["draws"])):
        for field in KEY_FIELDS + DECISION_FIELDS:
            if w[field] != g[field]:
                diff = Diff(f"{path}.draws[{i}].{field}", _show(w[field]), _show(g[field]))
                if field in KEY_FIELDS:
                    return diff, None
                return diff, None if inconsistency(got, drafts) else precision_reason(w, g, profile)
    if len(want["draws"]) != len(got["draws"]):
        return Diff(f"len({path}.draws)", str(len(want["draws"])), str(len(got["draws"]))), None
    for field in ("accepted", "emitted"):
        diff = first_difference(want[field], got[field], f"{path}.{field}")
        if diff is not None:
            return diff, None
    return None


def compare(case: dict, output: dict, profile: PrecisionProfile) -> Verdict:
    case_id, inputs = case["id"], case["input"]["requests"]
    wanted = case["expected"]["requests"]
    if set(output) != {"requests"} or not isinstance(output["requests"], list):
        raise Malformed("", "the answer must be exactly {requests: [...]}")
    if len(output["requests"]) != len(wanted):
        raise Malformed("requests", f"{len(output['requests'])} request answers for {len(wanted)} requests")
    divergences: list[tuple[Diff, str | None]] = []
    for r, (want, got, inp) in enumerate(zip(wanted, output["requests"], inputs)):
        path = f"requests[{r}]"
        got = check_request(got, path, len(inp["draft_tokens"]))
        excess = too_many(got, path, len(inp["draft_tokens"]))
        if excess is not None:
            return failed(case_id, f"more than K + 1 tokens or draws: {excess}", excess)
        bad_token = out_of_range(got, path, case["input"]["vocab"])
        if bad_token is not None:
            return failed(case_id, f"token outside the vocabulary: {bad_token}", bad_token)
        divergence = request_divergence(want, got, inp["draft_tokens"], path, profile)
        if divergence is not None:
            divergences.append(divergence)
    if not divergences:
        return passed(case_id)
    for diff, reason in divergences:
        if reason is None:
            return failed(case_id, f"first divergence at {diff}", diff)
    diff, reason = divergences[0]
    return precision(case_id, f"divergence at {diff} within declared margins: {reason}", diff)

