"""Comparator of ``proposal_batch``: each request judged as its own ``proposal_chain`` case.

An answer is ``{"requests": [...]}``, one ``proposal_chain`` answer per request in
batch order (another length is ``error``). Each is judged by
:func:`qconform.harness.judging.proposal.compare` against that request's input and
expected chain, with the same precision rules (its own rows' ``fp64_may_differ``
and ``exp_margin_ulp``). The batch is ``fail`` when any request fails (the first
one is reported, its paths prefixed ``requests[r].``), ``precision`` when none
fails and some request is ``precision``, else ``pass``. A request that is right
alone but wrong in the batch (a parameter sliced from another request, a key
taken from the batch row) fails here.
"""

from __future__ import annotations

from qconform.harness.adapter import PrecisionProfile
from qconform.harness.judging import proposal as compare_proposal
from qconform.harness.judging.value_diff import Malformed
from qconform.harness.verdicts import Diff, Verdict, VerdictClass, failed, passed, precision


def in_request(r: int, diff: Diff | None) -> Diff | None:
    return None if diff is None else Diff(f"requests[{r}].{diff.path}", diff.expected, diff.got)


def request_verdicts(case: dict, output: dict, profile: PrecisionProfile) -> list[tuple[int, Verdict]]:
    """Each request's verdict, as a ``proposal_chain`` case of its own."""
    inputs, expected = case["input"]["requests"], case["expected"]["requests"]
    answers = output.get("requests")
    if set(output) != {"requests"} or not isinstance(answers, list) or len(answers) != len(inputs):
        raise Malformed("requests", f'the answer must be {{"requests": [...]}} with {len(inputs)} chain answers')
    verdicts = []
    for r, (inp, want, answer) in enumerate(zip(inputs, expected, answers)):
        if not isinstance(answer, dict):
            raise Malformed(f"requests[{r}]", f"a chain answer is an object, not {type(answer).__name__}")
        try:
            verdicts.append(
                (r, compare_proposal.compare({"id": case["id"], "input": inp, "expected": want}, answer, profile))
            )
        except Malformed as exc:
            raise Malformed(f"requests[{r}].{exc.path}" if exc.path else f"requests[{r}]", exc.detail) from None
    return verdicts


def compare(case: dict, output: dict, profile: PrecisionProfile) -> Verdict:
    verdicts = request_verdicts(case, output, profile)
    for cls, make in ((VerdictClass.FAIL, failed), (VerdictClass.PRECISION, precision)):
        for r, verdict in verdicts:
            if verdict.cls is cls:
                return make(case["id"], f"request {r}: {verdict.message}", in_request(r, verdict.diff))
    return passed(case["id"])
