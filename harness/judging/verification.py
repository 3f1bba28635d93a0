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
correction or bonus draw, if any: at most one, as a round draws). Everything
after the divergent draw follows from it and is not compared. Any other difference is ``fail``.

Malformed answers are ``error``: a wrong number of requests, a missing or
mistyped field. More than ``K + 1`` emitted tokens or draws is a well-formed
wrong answer (flashinfer #879), so ``fail``, as is a token outside the vocabulary.
A draw's own ``margin``, if the adapter sends one, is not compared: the margin
that counts is the case's.
"""

from __future__ import annotations

from collections.abc import Callable

from qconform.generators.encoding import decode_rational
from qconform.generators.families.verification_round import decode_request
from qconform.harness.adapter import PrecisionProfile
from qconform.harness.judging.judge import PartialMode, profile_margin
from qconform.harness.judging.value_diff import Malformed, first_difference
from qconform.harness.verdicts import Diff, Verdict, brief, failed, passed, precision
from qconform.spec.verification import RoundInput, emission_ends, residual_row

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
    if len(finals) > 1:
        return f"it reports {len(finals)} correction or bonus draws, and a round draws at most one"
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


def request_divergence(
    want: dict, got: dict, drafts: list[int], path: str, profile: PrecisionProfile
) -> tuple[Diff, str | None] | None:
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


#: ``divergence(want, got, request input, path) -> (diff, precision reason or None) | None`` of one request
RequestDivergence = Callable[[dict, dict, dict, str], "tuple[Diff, str | None] | None"]


def judge_requests(case: dict, output: dict, divergence: RequestDivergence, scope: str = "") -> Verdict:
    """Walk the answered requests of ``case`` with the checks both modes share (structure,
    at most K + 1 tokens or draws, tokens in the vocabulary), then judge the divergences
    that ``divergence`` finds: any plain one fails, only declared-margin ones are precision.
    ``scope`` is said in every message (the partial mode names what it judged)."""
    case_id, inputs = case["id"], case["input"]["requests"]
    wanted = case["expected"]["requests"]
    if set(output) != {"requests"} or not isinstance(output["requests"], list):
        raise Malformed("", "the answer must be exactly {requests: [...]}")
    if len(output["requests"]) != len(wanted):
        raise Malformed("requests", f"{len(output['requests'])} request answers for {len(wanted)} requests")
    suffix = f" ({scope})" if scope else ""
    divergences: list[tuple[Diff, str | None]] = []
    for r, (want, got, inp) in enumerate(zip(wanted, output["requests"], inputs)):
        path = f"requests[{r}]"
        got = check_request(got, path, len(inp["draft_tokens"]))
        excess = too_many(got, path, len(inp["draft_tokens"]))
        if excess is not None:
            return failed(case_id, f"more than K + 1 tokens or draws: {excess}{suffix}", excess)
        bad_token = out_of_range(got, path, case["input"]["vocab"])
        if bad_token is not None:
            return failed(case_id, f"token outside the vocabulary: {bad_token}{suffix}", bad_token)
        found = divergence(want, got, inp, path)
        if found is not None:
            divergences.append(found)
    for diff, reason in divergences:
        if reason is None:
            return failed(case_id, f"first divergence at {diff}{suffix}", diff)
    if divergences:
        diff, reason = divergences[0]
        return precision(case_id, f"divergence at {diff} within declared margins: {reason}{suffix}", diff)
    return passed(case_id, scope)


def compare(case: dict, output: dict, profile: PrecisionProfile) -> Verdict:
    return judge_requests(
        case, output, lambda want, got, inp, path: request_divergence(want, got, inp["draft_tokens"], path, profile)
    )


# --- partial injection (docs/harness.md, "Partial injection") ------------------------------

#: The RNG ABI domains of a round, in draw order, and the one a partial adapter must take
#: injected: acceptance decisions are compared draw for draw, the rest is checked against them.
PARTIAL_MODE = PartialMode(domains=("ACCEPT", "CORRECTION"), required="ACCEPT")


def final_row_support(request: RoundInput, accepted: int) -> tuple[str, set[int]]:
    """The row that the spec draws the final token from after ``accepted`` accepted drafts,
    named, and its support: the residual ``max(p_{j+1} - q_{j+1}, 0)`` at a rejection, or
    the bonus row ``p_{K+1}`` after a full acceptance (R11, R33)."""
    depth = len(request.draft_tokens)
    if accepted < depth:
        row = residual_row(request.p_rows[accepted], request.q_rows[accepted])
        name = f"the residual max(p_{accepted + 1} - q_{accepted + 1}, 0)"
    else:
        row, name = request.p_rows[depth], f"the bonus row p_{depth + 1}"
    return name, {v for v, mass in enumerate(row) if mass > 0}


def final_due(request: RoundInput, accepted: int) -> bool:
    """Whether a round that emitted ``accepted`` drafts still emits a final token: it does
    unless a stop token or the budget ended emission at the last accepted draft."""
    return accepted == 0 or not emission_ends(request.draft_tokens[:accepted], request)


def support_text(support: set[int]) -> str:
    shown = sorted(support)
    return ", ".join(map(str, shown[:8])) + (f" and {len(shown) - 8} more" if len(shown) > 8 else "")


def partial_divergence(
    want: dict, got: dict, request: RoundInput, path: str, profile: PrecisionProfile, injected: tuple[str, ...]
) -> tuple[Diff, str | None] | None:
    """(first difference, precision reason or None) of one request answered in partial mode."""
    drafts = request.draft_tokens
    for i, draw in enumerate(got["draws"]):
        if draw["domain"] not in injected:
            raise Malformed(
                f"{path}.draws[{i}]",
                f"a {draw['domain']} draw is the adapter's own in partial "
                f"mode (injected: {', '.join(injected)}) and is not reported",
            )
    expected = [d for d in want["draws"] if d["domain"] in injected]
    divergence: tuple[Diff, str | None] | None = None
    for i, (w, g) in enumerate(zip(expected, got["draws"])):
        field = next((f for f in KEY_FIELDS + DECISION_FIELDS if w[f] != g[f]), None)
        if field is not None:
            diff = Diff(f"{path}.draws[{i}].{field}", _show(w[field]), _show(g[field]))
            reason = None if field in KEY_FIELDS else precision_reason(w, g, profile)
            divergence = (diff, reason)
            break
    accepted = got["accepted"]
    leading = next((i for i, d in enumerate(got["draws"]) if d["decision"] != "accept"), len(got["draws"]))
    emitted = got["emitted"]
    if accepted != leading or emitted[:accepted] != drafts[:accepted]:
        return Diff(
            f"{path}.accepted",
            f"its own {leading} leading accepts, emitted as drafted",
            f"{accepted} with emitted {emitted}",
        ), None
    if divergence is not None and divergence[1] is None:
        return divergence
    if divergence is None and len(expected) != len(got["draws"]):
        return Diff(f"len({path}.draws)", str(len(expected)), str(len(got["draws"]))), None
    due = final_due(request, accepted)
    if len(emitted) != accepted + due:
        return Diff(f"len({path}.emitted)", str(accepted + due), str(len(emitted))), None
    if due:
        name, support = final_row_support(request, accepted)
        if emitted[-1] not in support:
            return Diff(
                f"{path}.emitted[{accepted}]", f"a token of {name}: {support_text(support)}", str(emitted[-1])
            ), None
    return divergence


def compare_partial(case: dict, output: dict, profile: PrecisionProfile, injected: tuple[str, ...]) -> Verdict:
    """Partial injection: the draws of the ``injected`` domains draw for draw (acceptance
    flips within ``ratio_margin`` are ``precision``); every token the adapter drew itself
    must lie in the support of the row the spec draws it from, given the adapter's own
    accepted count. The law of those tokens is not judged here but by ``qconform stat``."""
    vocab = case["input"]["vocab"]
    own = ", ".join(d for d in PARTIAL_MODE.domains if d not in injected)
    scope = f"partial injection: {', '.join(injected)} draw for draw; {own} tokens in support (law: qconform stat)"
    return judge_requests(
        case,
        output,
        lambda want, got, inp, path: partial_divergence(want, got, decode_request(inp, vocab), path, profile, injected),
        scope,
    )
