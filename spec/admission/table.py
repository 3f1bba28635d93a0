"""Decision tables: a declarative language for admission policies (R36).

A table holds one entry per step ``i = 1..n`` (``n`` at most the maximum depth;
past its last entry a table stops). An entry names the values it reads before
deciding (``x<j>``, ``c<j>``, ``t<j>``; see :mod:`.reveal`) and its decisions,
keyed first by the row key of the committed context (``""`` or the last
committed token, :func:`~.scenario.row_key`), then by the draft prefix that its
reads encode, ``x_1..x_r`` with ``r = reveal_depth(reads)``, written as
comma-joined token IDs (``""`` when ``r = 0``). Evaluating step ``i``: read the
named values, reveal ``x_1..x_r``, answer ``decisions[context][prefix]``; a
reached state with no decision is BAD_POLICY.

The table is measurable (R36) iff every step ``i`` has ``r <= i - 1``. Any
language can evaluate a table; :func:`tabulate_policy` writes the table of a
Python policy on a Markov scenario.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Mapping, Sequence

from qconform.spec.admission.choices import Choices
from qconform.spec.admission.draws import DrawOptions
from qconform.spec.admission.policy import ADMIT, STOP, AdmissionView, Policy, decision_of
from qconform.spec.admission.reveal import DraftBlock, ReadLog, parse_read, reveal_depth
from qconform.spec.admission.scenario import Scenario, row_key, row_keys
from qconform.spec.distribution import REAL_UNIFORM
from qconform.spec.errors import refuse
from qconform.spec.rules import defines


@dataclass(frozen=True)
class TableStep:
    """The entry of step ``step``: what it reads, and its decision per context key and revealed prefix."""

    step: int
    reads: tuple[str, ...]
    decisions: Mapping[str, Mapping[str, str]]


@dataclass(frozen=True)
class PolicyTable:
    """A decision-table policy: ``steps[i - 1]`` decides step ``i``."""

    steps: tuple[TableStep, ...]


@defines("R36")
def prefix_key(tokens: Sequence[int]) -> str:
    """Comma-joined token IDs; ``""`` for the empty prefix."""
    return ",".join(str(token) for token in tokens)


@defines("R36")
def check_table(table: PolicyTable, vocab: int, max_depth: int) -> None:
    """Refuse a malformed table (BAD_POLICY): steps out of order or past the maximum depth,
    unknown read names, a read past the maximum depth, unknown context keys, prefix keys of the
    wrong length or outside the vocabulary, decisions other than admit/stop."""
    if len(table.steps) > max_depth:
        raise refuse("BAD_POLICY", f"{len(table.steps)} steps for a maximum depth of {max_depth}")
    contexts = set(row_keys(vocab))
    tokens = {str(v) for v in range(vocab)}
    for number, entry in enumerate(table.steps, start=1):
        if entry.step != number:
            raise refuse("BAD_POLICY", f"entry {number} is numbered step {entry.step!r}")
        for name in entry.reads:
            if parse_read(name)[1] > max_depth:
                raise refuse("BAD_POLICY", f"step {number} reads {name}, past depth {max_depth}")
        depth = reveal_depth(entry.reads)
        for context, by_prefix in entry.decisions.items():
            if context not in contexts:
                raise refuse("BAD_POLICY", f"step {number}: unknown context key {context!r}")
            for key, decision in by_prefix.items():
                parts = key.split(",") if key else []
                if len(parts) != depth or not set(parts) <= tokens:
                    raise refuse("BAD_POLICY", f"step {number}: prefix key {key!r} is not {depth} token IDs")
                if decision not in (ADMIT, STOP):
                    raise refuse("BAD_POLICY", f"step {number}: decision {decision!r} is not admit or stop")


@defines("R36")
def table_policy(table: PolicyTable) -> Policy:
    """The policy a table describes (see the module docstring)."""

    def policy(view: AdmissionView) -> str:
        if view.step > len(table.steps):
            return STOP
        entry = table.steps[view.step - 1]
        key = prefix_key(view.reveal(entry.reads))
        decision = entry.decisions.get(row_key(view.history), {}).get(key)
        if decision is None:
            raise refuse(
                "BAD_POLICY", f"no decision at step {view.step}, context {row_key(view.history)!r}, prefix {key!r}"
            )
        return decision

    return policy


def read_order(name: str) -> tuple[int, str]:
    kind, j = parse_read(name)
    return j, kind


def step_view(
    scenario: Scenario, context: tuple[int, ...], block: tuple[int, ...], step: int
) -> tuple[AdmissionView, ReadLog]:
    """The view of ``step`` over a fixed draft ``block`` (its draws replayed), with a fresh log."""
    log = ReadLog()
    draft_block = DraftBlock(scenario, context, Choices(block), DrawOptions(scenario, REAL_UNIFORM))
    return AdmissionView(step, draft_block, log, ()), log


@defines("R36")
def tabulate_policy(policy: Policy, scenario: Scenario) -> PolicyTable:
    """The decision table of ``policy`` on a Markov scenario, one entry per step up to the maximum depth.

    Step ``i`` is asked for every round-start context (empty, or one committed
    token) and every full draft block, with no prior rounds. Its reads are the
    union of what it read; its decisions must then depend only on the prefix
    those reads encode (else BAD_POLICY). Meant for policies that see the
    history through its last token only and ignore prior rounds.
    """
    vocab, depth = scenario.vocab, scenario.max_depth
    steps = []
    for step in range(1, depth + 1):
        answers: list[tuple[str, tuple[int, ...], str]] = []
        reads: set[str] = set()
        for context_key in row_keys(vocab):
            context = (int(context_key),) if context_key else ()
            for block in product(range(vocab), repeat=depth):
                view, log = step_view(scenario, context, block, step)
                answers.append((context_key, block, decision_of(policy(view))))
                reads.update(log.names())
        ordered = tuple(sorted(reads, key=read_order))
        revealed = reveal_depth(ordered)
        decisions: dict[str, dict[str, str]] = {key: {} for key in row_keys(vocab)}
        for context_key, block, decision in answers:
            key = prefix_key(block[:revealed])
            if decisions[context_key].setdefault(key, decision) != decision:
                raise refuse("BAD_POLICY", f"step {step} decides on more than it reads ({', '.join(ordered)})")
        steps.append(TableStep(step, ordered, decisions))
    return PolicyTable(tuple(steps))
