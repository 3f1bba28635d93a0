"""Vector family ``proposal_batch``: one round of proposals for a batch of requests (R22, R27).

A batch holds up to four requests of one draft model (one depth, one vocabulary,
one support policy, one Markov head, R27). Each request brings its own RNG
identity, last committed token, **draft temperature** and base logits, and its
chain must be exactly the one it would have alone (R22): a kernel that slices a
per-request parameter wrongly (request 0's temperature for the whole batch,
TRT-LLM #12588) or keys the RNG by batch row fails here while passing every
single-request ``proposal_chain`` case.

Each request object, and each answer, is in the ``proposal_chain`` format
(docs/formats/proposal_chain.md); the answer is ``{"requests": [...]}`` in batch
order. Spec: :func:`qconform.spec.proposal.proposal_batch`.
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from qconform.generators import precedence
from qconform.generators.encoding import decode_blob, f32_bits
from qconform.generators.families import proposal_chain as chain
from qconform.generators.registry import Case, Family, Group, Note
from qconform.generators.schemas import closed_object as closed
from qconform.spec.constants import DEPTH, MAX_REQUESTS
from qconform.spec.errors import SpecError
from qconform.spec.proposal import ProposalInput, SupportPolicy, check_proposal_batch, proposal_batch, proposal_chain
from qconform.spec.rng_abi import RngIdentity

RULES = ("R01", "R05", "R08", "R22", "R27")

NOTES = {
    precedence.FLAG: precedence.NOTE,
    "PER_REQUEST_TEMPERATURE": Note(
        "KNOWN_BUG",
        "The requests of the batch have different draft temperatures; each row is tempered by its own "
        "request's temperature.",
        "Catches a per-request parameter sliced wrongly, e.g. request 0's temperature applied to the whole "
        "batch (TRT-LLM #12588), or a batch-wide temperature.",
    ),
    "BATCH_INVARIANCE": Note(
        "KNOWN_BUG",
        "A request appears twice, or in another batch position: its chain is the same wherever it sits.",
        "Catches RNG keyed by batch row and state shared between the requests of a batch.",
    ),
    "TOP_K_CHAIN": Note("FUNCTIONALITY", "Top-k sparse q rows (R07).", "General agreement for sparse batches."),
    "INCOMPATIBLE_BATCH": Note(
        "MALFORMED_INPUT",
        "No request, more than four, or requests of different depths, support policies or draft models (R27).",
        "Catches a batch assembled from incompatible shapes instead of refused.",
    ),
}


def solve(case_input: dict) -> dict:
    """The spec's answer to one batch: each request's chain, in batch order, or the refusal code."""
    try:
        requests = case_input["requests"]
        check_proposal_batch(
            [decode_blob(r["base_logits"], "f32")[1][0] for r in requests],
            [json.dumps([r["support"], r["markov"]], sort_keys=True) for r in requests],
        )
        inputs = []
        for request in requests:  # request by request, in batch order: the first refused decides
            inputs.append(chain.decode_input(request))
            proposal_chain(inputs[-1])
        return {"requests": [chain.encode_result(result) for result in proposal_batch(inputs)]}
    except SpecError as error:
        return {"error": error.code}


def batch_case(
    name: str, comment: str, flags: tuple[str, ...], inputs: list[ProposalInput], result: str = "valid"
) -> Case:
    case_input = {"requests": [chain.encode_input(inp) for inp in inputs]}
    expected = solve(case_input)
    assert ("error" in expected) == (result == "invalid"), (name, expected)
    return Case(
        name=name,
        comment=comment,
        rules=RULES + (("R07",) if inputs and inputs[0].support.k else ()),
        flags=flags,
        input=case_input,
        expected=expected,
        result=result,
    )


def requests_of_one_model(
    seed: int, vocab: int, temperatures: tuple[float, ...], support: SupportPolicy
) -> list[ProposalInput]:
    """Requests sharing one Markov head and support, each with its own identity, last
    committed token, temperature and base logits."""
    rng = random.Random(seed)
    model = chain.make_input(seed, vocab, 2, 1.2, 1.0, support, RngIdentity(0, 0, 0, 0))
    requests = []
    for r, temperature in enumerate(temperatures):
        logits = chain.random_matrix(rng, DEPTH, vocab, 2.0)
        ident = RngIdentity(seed=seed * 16 + r, generation=1 + r, round=2 + 3 * r, anchor=100 * r + 7)
        requests.append(
            replace(
                model,
                base_logits=logits,
                last_committed_token=rng.randrange(vocab),
                temperature_bits=f32_bits(temperature),
                identity=ident,
            )
        )
    return requests


def batch_cases() -> Iterator[Case]:
    four = requests_of_one_model(0xBA71, 64, (0.5, 1.0, 1.7, 0.8), SupportPolicy.dense())
    flags = ("PER_REQUEST_TEMPERATURE",)
    yield batch_case("four-temperatures", "Four dense requests over V = 64 at T = 0.5, 1, 1.7, 0.8.", flags, four)
    yield batch_case(
        "four-temperatures-reversed",
        "The same four requests in reverse order.",
        flags + ("BATCH_INVARIANCE",),
        four[::-1],
    )
    yield batch_case(
        "request-alone", "The T = 1.7 request of four-temperatures, alone.", ("BATCH_INVARIANCE",), four[2:3]
    )
    yield batch_case(
        "request-twice",
        "The T = 0.5 request at batch positions 1 and 3.",
        flags + ("BATCH_INVARIANCE",),
        [four[0], four[1], four[0]],
    )
    sparse = requests_of_one_model(0xBA72, 256, (0.6, 1.3), SupportPolicy.top_k(8))
    yield batch_case(
        "topk8-two-temperatures",
        "Two top-8 requests over V = 256 at T = 0.6 and 1.3.",
        flags + ("TOP_K_CHAIN",),
        sparse,
    )


def invalid_cases() -> Iterator[Case]:
    five = requests_of_one_model(0xBA73, 16, (1.0, 0.9, 1.1, 1.2, 0.7), SupportPolicy.dense())
    yield batch_case("empty", "No request: a batch holds 1 to 4 (R27).", ("INCOMPATIBLE_BATCH",), [], "invalid")
    yield batch_case(
        "five-requests", "Five requests: the batch bound is four (R27).", ("INCOMPATIBLE_BATCH",), five, "invalid"
    )
    other_support = replace(five[1], support=SupportPolicy.top_k(4))
    yield batch_case(
        "mixed-support",
        "A dense and a top-4 request in one batch.",
        ("INCOMPATIBLE_BATCH",),
        [five[0], other_support],
        "invalid",
    )
    other_model = replace(five[1], markov_right=[[f32_bits(0.5)] * 16 for _ in five[1].markov_right])
    yield batch_case(
        "mixed-draft-models",
        "Two requests with different Markov heads.",
        ("INCOMPATIBLE_BATCH",),
        [five[0], other_model],
        "invalid",
    )
    shorter = replace(five[1], base_logits=five[1].base_logits[:3])
    yield batch_case(
        "mixed-depths",
        "Depths 5 and 3 in one batch (R27, R35).",
        ("INCOMPATIBLE_BATCH",),
        [five[0], shorter],
        "invalid",
    )


def build() -> Iterator[Group]:
    yield Group(
        "batches",
        "Batches of one draft model, each request with its own temperature and identity.",
        RULES + ("R07",),
        list(batch_cases()),
    )
    yield Group("incompatible_batches", "Batches the worker must refuse (R27).", ("R27",), list(invalid_cases()))
    yield Group(
        "precedence",
        "Every refusal row alone and every pair that can fail together: the earlier row's code.",
        ("R05", "R07", "R27"),
        list(precedence.precedence_cases(BATCH_BREAKS, solve, ("R05", "R07", "R27"))),
    )


@dataclass
class BatchDraft:
    """A proposal batch being broken: one ``ChainDraft`` per request."""

    requests: list[chain.ChainDraft]

    def input_json(self) -> dict:
        return {"requests": [r.input_json() for r in self.requests]}


#: ``refusal_order.PROPOSAL_BATCH_REFUSALS`` rows 4-14 are the chain's rows 1-11 on request 0.
CHAIN_ROW_OFFSET = 3


def batch_draft(rows: frozenset[int]) -> BatchDraft:
    return BatchDraft([chain.chain_draft(rows)])


def five_requests(d: BatchDraft) -> None:
    d.requests += [copy.deepcopy(d.requests[0]) for _ in range(MAX_REQUESTS + 1 - len(d.requests))]


def appended(change: Callable[[chain.ChainDraft], None]) -> Callable[[BatchDraft], None]:
    """A copy of request 0, changed, appended to the batch."""

    def fault(d: BatchDraft) -> None:
        other = copy.deepcopy(d.requests[0])
        change(other)
        d.requests.append(other)

    return fault


def request_fault(n: int) -> Callable[[BatchDraft], object]:
    return lambda d: chain.CHAIN_BREAKS.faults[n - CHAIN_ROW_OFFSET](d.requests[0])


BATCH_BREAKS = precedence.Breaks[BatchDraft](
    family="proposal_batch",
    base=batch_draft,
    faults={
        1: five_requests,
        2: appended(lambda r: r.change(base_logits=[*r.inp.base_logits, r.inp.base_logits[0]])),
        3: appended(lambda r: r.change(markov_left=[[b ^ 1 for b in row] for row in r.inp.markov_left])),
        **{n: request_fault(n) for n in range(4, 15)},
    },
    encode=BatchDraft.input_json,
    exclusive=frozenset(frozenset(n + CHAIN_ROW_OFFSET for n in pair) for pair in chain.CHAIN_BREAKS.exclusive)
    | {frozenset({2, 5})},
    why="as proposal_chain says; with no base logit row in request 0, a longer copy has only copies of none",
)


FAMILY = Family(
    name="proposal_batch",
    description="One round of proposal chains for a batch of up to four requests of one draft model (R22, R27).",
    rules=RULES + ("R07",),
    notes=NOTES,
    margins=chain.FAMILY.margins,
    build=build,
    solve=solve,
    input_schema=closed({"requests": {"type": "array", "items": chain.FAMILY.input_schema}}),
    expected_schema={
        "oneOf": [
            closed(
                {
                    "requests": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": MAX_REQUESTS,
                        "items": chain.ANSWER,
                    }
                }
            ),
            closed({"error": {"enum": chain.REFUSALS}}),
        ]
    },
    comparator="proposal_batch",
    precedence=BATCH_BREAKS,
)
