"""Vector family ``admission``: depth-admission policies audited exactly (R35-R38).

Each case gives a Markov scenario (q and p rows keyed by the last token of the
context), a maximum depth, a horizon, and an admission policy as a decision
table (:mod:`qconform.spec.admission.table`). It expects the exact law of the
first ``horizon`` emitted tokens under the policy with a real-valued uniform,
the target law, their total variation, the sequences whose mass moved, the
first-token laws, and every premature read (R36) with its probability.

The tables are written by :func:`~qconform.spec.admission.table.tabulate_policy`
from the spec's Python policies (fixed depth, the toy selection, the DSpark
appendix-A scheduler, the prefix scan) and from small policies defined here.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Iterator

from qconform.generators import precedence
from qconform.generators.encoding import decode_rational, encode_rational
from qconform.generators.families.categorical_sampling import (
    ROW_BREAKS,
    RowDraft,
    decode_qrow,
    encode_draft,
    encode_qrow,
    raw_qrow,
    row_draft,
)
from qconform.generators.families.distribution import RATIONALS, rationals
from qconform.generators.registry import Case, Family, Group, Note
from qconform.generators.schemas import closed_object as closed
from qconform.spec.admission import (
    ADMIT,
    DSPARK_SPS,
    LIGHT_LOAD_SPS,
    STOP,
    AdmissionView,
    Audit,
    Policy,
    PolicyTable,
    Scenario,
    TableStep,
    audit_policy,
    dspark_appendix_a_mirrored_scenario,
    dspark_appendix_a_scenario,
    dspark_appendix_a_scheduler,
    fixed_depth,
    markov_scenario,
    prefix_scheduler,
    sampled_confidence_scenario,
    standard_scenarios,
    table_policy,
    tabulate_policy,
    toy_selection_policy,
    toy_selection_scenario,
)
from qconform.spec.admission.scenario import check_row_keys, row_keys
from qconform.spec.admission.table import check_table
from qconform.spec.constants import M
from qconform.spec.errors import SpecError
from qconform.spec.qrow import QRow, check_q_rows
from qconform.spec.refusal_order import ADMISSION_REFUSALS

RULES = ("R35", "R36", "R37", "R38")
#: the rules its refusals cite (the precedence group): the Markov rows' keys, the target rows, the q rows, the table
REFUSAL_RULES = ("R01", "R10", "R19", "R36")

NOTES = {
    precedence.FLAG: precedence.NOTE,
    "FIXED_DEPTH": Note(
        "BASIC",
        "The depth is fixed before sampling (R35): the law is exactly the target law.",
        "Baseline: a verifier or scheduler that moves any mass here is wrong.",
    ),
    "TARGET_ONLY": Note("EDGE_CASE", "Depth 0: every round emits one token from p.", "The degenerate fixed depth."),
    "MEASURABLE_ADAPTIVE": Note(
        "FUNCTIONALITY",
        "An adaptive policy that admits position i using only x_1..x_(i-1) and the confidences "
        "that encode them (R36): lossless.",
        "Shows that adaptivity itself is allowed.",
    ),
    "PREMATURE_READ": Note(
        "FUNCTIONALITY",
        "The policy reads x_i, or a value that encodes x_i, before deciding whether position i is verified (R36).",
        "Flagged with the round, the step and the value read, whatever the law.",
    ),
    "LAW_PRESERVED_BY_CHANCE": Note(
        "EDGE_CASE",
        "A premature read that happens not to move mass in this scenario.",
        "Measurability is judged on reads, not on one scenario's law.",
    ),
    "SELECTION_BIAS": Note(
        "FUNCTIONALITY",
        "Admission depends on the draft it admits: the emitted law moves away from p, and exact "
        "verification cannot undo it.",
        "The law differs from the target law.",
    ),
    "TOY_REGRESSION": Note(
        "BASIC",
        "The design's toy regression (R38): token 0 gets 3/4 instead of 1/2.",
        "Pins the numbers the design states.",
    ),
    "PUBLISHED_COUNTEREXAMPLE": Note(
        "FUNCTIONALITY",
        "DSpark v1 appendix A (R37), with p and q reconstructed so that the confidences 0.8, 0.9 "
        "and 0 are the exact acceptance rates (docs/admission.md).",
        "Pins the published scores' consequence.",
    ),
    "EARLY_STOP_SCAN": Note(
        "FUNCTIONALITY",
        "The prefix scan that breaks when the score stops improving: a sequential stopping rule.",
        "Passes with position confidences, fails with the sampled tokens' own confidences.",
    ),
    "MALFORMED_POLICY": Note(
        "EDGE_CASE",
        "The decision table is malformed or has no decision for a reached state.",
        "Refused with BAD_POLICY.",
    ),
}


def encode_table(table: PolicyTable) -> dict:
    return {
        "steps": [
            {
                "step": entry.step,
                "reads": list(entry.reads),
                "decisions": {ctx: dict(by_prefix) for ctx, by_prefix in entry.decisions.items()},
            }
            for entry in table.steps
        ]
    }


def decode_table(obj: dict) -> PolicyTable:
    return PolicyTable(tuple(TableStep(s["step"], tuple(s["reads"]), s["decisions"]) for s in obj["steps"]))


def decode_scenario(case_input: dict) -> Scenario:
    """The case's Markov scenario, refused in the order of ``refusal_order.ADMISSION_REFUSALS`` rows 1-9:
    its row keys, every q row (each condition over all of them), every p row's length, then its values."""
    vocab = case_input["vocab"]
    check_row_keys(vocab, case_input["q"], case_input["p"])
    check_q_rows(vocab, [raw_qrow(row) for row in case_input["q"].values()])
    q_rows = {key: decode_qrow(row, vocab) for key, row in case_input["q"].items()}
    p_rows = {key: [decode_rational(x) for x in row] for key, row in case_input["p"].items()}
    return markov_scenario("vector", vocab, case_input["depth"], q_rows, p_rows)


def encode_law(law: dict) -> list[dict]:
    return [{"tokens": list(tokens), "probability": encode_rational(mass)} for tokens, mass in law.items()]


def encode_audit(audit: Audit) -> dict:
    return {
        "law": encode_law(audit.law),
        "target": encode_law(audit.target),
        "tv": encode_rational(audit.tv),
        "moved": [
            {"tokens": list(m.tokens), "law": encode_rational(m.law), "target": encode_rational(m.target)}
            for m in audit.moved
        ],
        "first_token_law": rationals(list(audit.first_token_law)),
        "first_token_target": rationals(list(audit.first_token_target)),
        "first_token_tv": encode_rational(audit.first_token_tv),
        "peeks": [
            {
                "round": peek.round,
                "step": peek.step,
                "read": peek.name,
                "probability": encode_rational(peek.probability),
            }
            for peek in audit.peeks
        ],
        "lossless": audit.lossless,
        "measurable": audit.measurable,
    }


def solve(case_input: dict) -> dict:
    """The spec's audit of the case's decision table in its scenario, or the refusal's code."""
    try:
        scenario = decode_scenario(case_input)
        table = decode_table(case_input["policy"])
        check_table(table, scenario.vocab, scenario.max_depth)
        return encode_audit(audit_policy(table_policy(table), scenario, case_input["horizon"]))
    except SpecError as error:
        return {"error": error.code}


def scenario_input(scenario: Scenario, horizon: int, table: PolicyTable) -> dict:
    """A case input: the scenario's Markov rows, its depth, the horizon and the policy table."""
    contexts = {key: ((int(key),) if key else ()) for key in row_keys(scenario.vocab)}
    return {
        "vocab": scenario.vocab,
        "depth": scenario.max_depth,
        "horizon": horizon,
        "q": {key: encode_qrow(scenario.q(context)) for key, context in contexts.items()},
        "p": {key: rationals(scenario.p(context)) for key, context in contexts.items()},
        "policy": encode_table(table),
    }


def policy_case(
    name: str,
    comment: str,
    flags: tuple[str, ...],
    rules: tuple[str, ...],
    scenario: Scenario,
    horizon: int,
    policy: Policy,
) -> Case:
    """A case whose table is tabulated from ``policy``; its audit must agree with the Python policy's."""
    case_input = scenario_input(scenario, horizon, tabulate_policy(policy, scenario))
    expected = solve(case_input)
    assert expected == encode_audit(audit_policy(policy, scenario, horizon)), f"table of {name} disagrees"
    return Case(name=name, comment=comment, rules=rules, flags=flags, input=case_input, expected=expected)


def battery(vocab: int, depth: int, name: str) -> Scenario:
    return next(s for s in standard_scenarios(vocab, depth) if s.name.startswith(name))


def fixed_depth_cases() -> Iterator[Case]:
    rules = ("R35",)
    flags = ("FIXED_DEPTH",)
    yield policy_case(
        "target-only-markov-v2",
        "Depth 0 over three tokens of the stream.",
        flags + ("TARGET_ONLY",),
        rules,
        battery(2, 2, "markov"),
        3,
        fixed_depth(0),
    )
    yield policy_case(
        "scenario-depth0-markov-v2",
        "A scenario whose rounds hold no draft (depth 0, an empty table): every token is target-only.",
        flags + ("TARGET_ONLY",),
        rules,
        battery(2, 0, "markov"),
        2,
        fixed_depth(0),
    )
    yield policy_case(
        "depth1-markov-v2",
        "Depth 1, non-dyadic p, q depending on the last token.",
        flags,
        rules,
        battery(2, 1, "markov"),
        2,
        fixed_depth(1),
    )
    yield policy_case(
        "depth2-markov-v2", "Depth 2 over three tokens.", flags, rules, battery(2, 2, "markov"), 3, fixed_depth(2)
    )
    yield policy_case(
        "depth2-partial-support-v3",
        "Depth 2; q on two tokens, p zero on q's likeliest.",
        flags,
        rules,
        battery(3, 2, "partial-support"),
        3,
        fixed_depth(2),
    )
    yield policy_case(
        "depth2-dspark-rows",
        "Depth 2 on the reconstructed DSpark rows: no selection, no bias.",
        flags,
        rules,
        dspark_appendix_a_scenario(),
        3,
        fixed_depth(2),
    )
    yield policy_case(
        "depth2-dspark-mirrored-rows",
        "Depth 2 on the mirrored DSpark rows: no selection, no bias.",
        flags,
        rules,
        dspark_appendix_a_mirrored_scenario(),
        3,
        fixed_depth(2),
    )


def admit_second_after_zero(view: AdmissionView) -> str:
    """Always admit x_1; admit x_2 only when x_1 is 0 (reads x_1 at step 2: measurable)."""
    return ADMIT if view.step == 1 or view.draft(1) == 0 else STOP


def admit_second_if_one(view: AdmissionView) -> str:
    """Always admit x_1; admit x_2 only when x_2 itself is 1 (reads x_2 at step 2: premature)."""
    return ADMIT if view.step == 1 or view.draft(2) == 1 else STOP


def peek_and_admit(view: AdmissionView) -> str:
    """Read x_1 before admitting it, then admit one draft whatever it is."""
    view.draft(1)
    return ADMIT if view.step == 1 else STOP


def sequential_cases() -> Iterator[Case]:
    rules = ("R36",)
    yield policy_case(
        "second-after-zero-markov-v2",
        "Admit x_2 only after x_1 = 0: decided on x_1 before x_2.",
        ("MEASURABLE_ADAPTIVE",),
        rules,
        battery(2, 2, "markov"),
        3,
        admit_second_after_zero,
    )
    yield policy_case(
        "second-after-zero-markov-v3",
        "The same over three tokens.",
        ("MEASURABLE_ADAPTIVE",),
        rules,
        battery(3, 2, "markov"),
        3,
        admit_second_after_zero,
    )
    yield policy_case(
        "second-if-one-markov-v2",
        "Admit x_2 only when x_2 = 1: reads x_2 before admitting it.",
        ("PREMATURE_READ", "SELECTION_BIAS"),
        rules,
        battery(2, 2, "markov"),
        3,
        admit_second_if_one,
    )
    yield policy_case(
        "peek-and-admit-v2",
        "Reads x_1 before admitting it, admits anyway: flagged, law unmoved.",
        ("PREMATURE_READ", "LAW_PRESERVED_BY_CHANCE"),
        rules,
        battery(2, 1, "markov"),
        2,
        peek_and_admit,
    )


def toy_cases() -> Iterator[Case]:
    rules = ("R36", "R38")
    flags = ("TOY_REGRESSION", "PREMATURE_READ", "SELECTION_BIAS")
    yield policy_case(
        "toy-first-token",
        "q = p uniform; x_1 admitted only when it is 0: token 0 has 3/4.",
        flags,
        rules,
        toy_selection_scenario(),
        1,
        toy_selection_policy,
    )
    yield policy_case(
        "toy-two-tokens",
        "The toy policy over two tokens of the stream.",
        flags,
        rules,
        toy_selection_scenario(),
        2,
        toy_selection_policy,
    )


def dspark_cases() -> Iterator[Case]:
    rules = ("R36", "R37")
    published = ("PUBLISHED_COUNTEREXAMPLE",)
    yield policy_case(
        "appendix-a-first-token",
        "Global selection: depth 2 after x_1 = 0 (S = 1.134), target-only "
        "after x_1 = 1 (S(0) = 1 beats 0.9 and 0.81): token 0 gets 9/20 instead of 3/10.",
        published + ("PREMATURE_READ", "SELECTION_BIAS"),
        rules,
        dspark_appendix_a_scenario(),
        1,
        dspark_appendix_a_scheduler(),
    )
    yield policy_case(
        "appendix-a-two-tokens",
        "The appendix-A selection over two tokens of the stream.",
        published + ("PREMATURE_READ", "SELECTION_BIAS"),
        rules,
        dspark_appendix_a_scenario(),
        2,
        dspark_appendix_a_scheduler(),
    )
    yield policy_case(
        "appendix-a-mirrored-first-token",
        "The mirrored reading: the admitted x_1 = 0 has p = 7/10 > "
        "q = 1/2, so it is always accepted: token 0 gets 17/20 instead of 7/10.",
        published + ("PREMATURE_READ", "SELECTION_BIAS"),
        rules,
        dspark_appendix_a_mirrored_scenario(),
        1,
        dspark_appendix_a_scheduler(),
    )
    yield policy_case(
        "appendix-a-mirrored-two-tokens",
        "The mirrored appendix-A selection over two tokens.",
        published + ("PREMATURE_READ", "SELECTION_BIAS"),
        rules,
        dspark_appendix_a_mirrored_scenario(),
        2,
        dspark_appendix_a_scheduler(),
    )
    yield policy_case(
        "prefix-scan-appendix-a",
        "The prefix scan on the same numbers breaks at depth 1 (0.9 < 1): target-only every round.",
        published + ("EARLY_STOP_SCAN",),
        rules,
        dspark_appendix_a_scenario(),
        2,
        prefix_scheduler(DSPARK_SPS),
    )
    yield policy_case(
        "prefix-scan-light-load",
        "The prefix scan with position confidences under a lighter load admits two drafts; it reads c_1..c_i only.",
        ("EARLY_STOP_SCAN", "MEASURABLE_ADAPTIVE"),
        rules,
        sampled_confidence_scenario(),
        3,
        prefix_scheduler(LIGHT_LOAD_SPS),
    )
    yield policy_case(
        "prefix-scan-sampled-confidence",
        "The prefix scan scored by the sampled tokens' q(x_i): "
        "reads t_i before admitting i; token 0 gets 5/8 instead of 1/2.",
        ("EARLY_STOP_SCAN", "PREMATURE_READ", "SELECTION_BIAS"),
        rules,
        sampled_confidence_scenario(),
        3,
        prefix_scheduler(LIGHT_LOAD_SPS, sampled_token_confidence=True),
    )


def invalid_case(name: str, comment: str, table: PolicyTable, depth: int = 1) -> Case:
    """The toy scenario (at ``depth``) with a malformed ``table``: BAD_POLICY."""
    case_input = {**scenario_input(toy_selection_scenario(), 1, table), "depth": depth}
    expected = solve(case_input)
    assert expected == {"error": "BAD_POLICY"}, f"invalid case {name} was accepted by the spec"
    return Case(
        name=name,
        comment=comment,
        rules=("R36",),
        flags=("MALFORMED_POLICY",),
        result="invalid",
        input=case_input,
        expected=expected,
    )


def invalid_cases() -> Iterator[Case]:
    every_context = row_keys(2)
    yield invalid_case(
        "missing-decision",
        "Step 1 reads x1 but decides only for x_1 = 0; x_1 = 1 is reached.",
        PolicyTable((TableStep(1, ("x1",), {k: {"0": ADMIT} for k in every_context}),)),
    )
    yield invalid_case(
        "step-misnumbered",
        "The only entry is numbered step 2.",
        PolicyTable((TableStep(2, (), {k: {"": ADMIT} for k in every_context}),)),
    )
    yield invalid_case(
        "prefix-key-too-long",
        "Step 1 reads nothing but keys its decision by a token.",
        PolicyTable((TableStep(1, (), {k: {"0": ADMIT, "1": STOP} for k in every_context}),)),
    )
    yield invalid_case(
        "read-past-depth-at-unreached-step",
        "Depth 2: step 1 always stops, so step 2 is never evaluated, but it reads x3, past the depth: the table "
        "is refused as written, not only where a round evaluates it.",
        PolicyTable(
            (
                TableStep(1, (), {k: {"": STOP} for k in every_context}),
                TableStep(2, ("x3",), {k: {"0,0,0": ADMIT} for k in every_context}),
            )
        ),
        depth=2,
    )
    yield invalid_case(
        "past-maximum-depth",
        "Two entries where a round holds one draft.",
        PolicyTable(tuple(TableStep(i, (), {k: {"": ADMIT} for k in every_context}) for i in (1, 2))),
    )


# --- refusal precedence ------------------------------------------------------------------------

#: ``refusal_order.ADMISSION_REFUSALS`` rows 2-7 are ``QROW_REFUSALS`` rows 1-6 on the empty context's q row.
QROW_ROW_OFFSET = 1


@dataclass
class AdmissionDraft:
    """A case being broken: the empty context's q row, the p rows by key, the decision table's steps
    (as JSON), at depth 1 and horizon 1; the other contexts' q rows are uniform."""

    q: RowDraft
    p: dict[str, list[Fraction]]
    steps: list[dict]
    depth: int = 1

    def input_json(self) -> dict:
        uniform = encode_qrow(QRow.dense([M // self.q.vocab] * self.q.vocab))
        return {
            "vocab": self.q.vocab,
            "depth": self.depth,
            "horizon": 1,
            "q": {key: encode_draft(self.q)["row"] if key == "" else uniform for key in row_keys(self.q.vocab)},
            "p": {key: rationals(row) for key, row in self.p.items()},
            "policy": {"steps": self.steps},
        }


def admission_draft(rows: frozenset[int]) -> AdmissionDraft:
    """A valid audit: row_draft's q row for the empty context, uniform p rows, one step that admits."""
    q = row_draft(frozenset(n - QROW_ROW_OFFSET for n in rows))
    keys = row_keys(q.vocab)
    step = {"step": 1, "reads": [], "decisions": {key: {"": ADMIT} for key in keys}}
    return AdmissionDraft(q, {key: [Fraction(1, q.vocab)] * q.vocab for key in keys}, [step])


def qrow_fault(n: int) -> Callable[[AdmissionDraft], object]:
    return lambda d: ROW_BREAKS.faults[n - QROW_ROW_OFFSET](d.q)


def one_more_entry(d: AdmissionDraft) -> None:
    """A copy of the last entry, numbered next: more entries than the depth, nothing else new."""
    d.steps.append({**copy.deepcopy(d.steps[-1]), "step": len(d.steps) + 1})


def read_past_depth(d: AdmissionDraft) -> None:
    """Step 1 reads ``c2`` (past depth 1; it encodes ``x_1``), each prefix key extended by every token,
    so a well-formed key stays well-formed and a malformed one stays malformed."""
    entry, tokens = d.steps[0], range(d.q.vocab)
    entry["reads"] = ["c2"]
    entry["decisions"] = {
        context: {
            ",".join(filter(None, (key, str(v)))): decision for key, decision in by_prefix.items() for v in tokens
        }
        for context, by_prefix in entry["decisions"].items()
    }


def heavier_target(d: AdmissionDraft) -> None:
    """The empty context's p row sums to 9/8: read first, so a checker that reads each row's length and
    values together answers BAD_TARGET_ROW on the pair with row 8 (on a later row), not BAD_SHAPE."""
    d.p[""][0] += Fraction(1, 8)


ADMISSION_BREAKS = precedence.Breaks[AdmissionDraft](
    family="admission",
    base=admission_draft,
    faults={
        1: lambda d: d.p.pop(str(d.q.vocab - 1)),
        **{n: qrow_fault(n) for n in range(2, 8)},
        8: lambda d: d.p["2"].pop(),
        9: heavier_target,
        10: one_more_entry,
        11: lambda d: d.steps[0].update(step=2),
        12: read_past_depth,
        13: lambda d: d.steps[0]["decisions"].update({str(d.q.vocab): {"": ADMIT}}),
        14: lambda d: d.steps[0]["decisions"]["0"].update({"1": ADMIT}),
        15: lambda d: d.steps[0]["decisions"].pop(""),  # the first round starts from the empty context
    },
    encode=AdmissionDraft.input_json,
    exclusive=frozenset(frozenset(n + QROW_ROW_OFFSET for n in pair) for pair in ROW_BREAKS.exclusive),
    why="a q row is dense or sparse (categorical_sampling's exclusive pair)",
)


def build() -> Iterator[Group]:
    yield Group(
        "fixed_depth",
        "Depths fixed before sampling (R35): the target law exactly.",
        ("R35",),
        list(fixed_depth_cases()),
    )
    yield Group("sequential", "Adaptive policies, measurable or not (R36).", ("R36",), list(sequential_cases()))
    yield Group("toy_selection", "The toy selection-bias regression (R38).", ("R36", "R38"), list(toy_cases()))
    yield Group("dspark", "DSpark v1 appendix A and the prefix scan (R37).", ("R36", "R37"), list(dspark_cases()))
    yield Group("invalid", "Malformed decision tables.", ("R36",), list(invalid_cases()))
    yield Group(
        "precedence",
        "Every refusal row alone and every pair that can fail together: the earlier row's code.",
        REFUSAL_RULES,
        list(precedence.precedence_cases(ADMISSION_BREAKS, solve, REFUSAL_RULES)),
    )


KEYS = {"pattern": r"^(?:[0-9]+)?$"}
TOKENS = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}
LAW = {"type": "array", "items": closed({"tokens": TOKENS, "probability": {"$ref": "#/$defs/rational"}})}
STEP = closed(
    {
        "step": {"type": "integer", "minimum": 1},
        "reads": {"type": "array", "items": {"type": "string", "pattern": r"^[xct][1-9][0-9]*$"}, "uniqueItems": True},
        "decisions": {
            "type": "object",
            "propertyNames": KEYS,
            "additionalProperties": {
                "type": "object",
                "propertyNames": {"pattern": r"^(?:[0-9]+(?:,[0-9]+)*)?$"},
                "additionalProperties": {"enum": [ADMIT, STOP]},
            },
        },
    }
)

FAMILY = Family(
    name="admission",
    description="Depth-admission policies as decision tables, audited exactly: the emitted law beside the target "
    "law, and every read that encodes a draft before its admission.",
    rules=tuple(sorted(set(RULES + REFUSAL_RULES))),
    notes=NOTES,
    build=build,
    solve=solve,
    input_schema=closed(
        {
            "vocab": {"type": "integer", "minimum": 2, "maximum": 16},
            "depth": {"type": "integer", "minimum": 0, "maximum": 8},
            "horizon": {"type": "integer", "minimum": 1, "maximum": 8},
            "q": {"type": "object", "propertyNames": KEYS, "additionalProperties": {"$ref": "#/$defs/qRow"}},
            "p": {"type": "object", "propertyNames": KEYS, "additionalProperties": RATIONALS},
            "policy": closed({"steps": {"type": "array", "items": STEP}}),
        }
    ),
    expected_schema={
        "oneOf": [
            closed(
                {
                    "law": LAW,
                    "target": LAW,
                    "tv": {"$ref": "#/$defs/rational"},
                    "moved": {
                        "type": "array",
                        "items": closed(
                            {
                                "tokens": TOKENS,
                                "law": {"$ref": "#/$defs/rational"},
                                "target": {"$ref": "#/$defs/rational"},
                            }
                        ),
                    },
                    "first_token_law": RATIONALS,
                    "first_token_target": RATIONALS,
                    "first_token_tv": {"$ref": "#/$defs/rational"},
                    "peeks": {
                        "type": "array",
                        "items": closed(
                            {
                                "round": {"type": "integer", "minimum": 1},
                                "step": {"type": "integer", "minimum": 1},
                                "read": {"type": "string", "pattern": r"^[xct][1-9][0-9]*$"},
                                "probability": {"$ref": "#/$defs/rational"},
                            }
                        ),
                    },
                    "lossless": {"type": "boolean"},
                    "measurable": {"type": "boolean"},
                }
            ),
            closed({"error": {"enum": sorted({row.code for row in ADMISSION_REFUSALS})}}),
        ]
    },
    precedence=ADMISSION_BREAKS,
)
