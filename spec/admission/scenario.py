"""Where an admission policy is audited: the rows it drafts and verifies against (R35, R36).

A round starts from a committed *context* (the tokens committed so far); its
drafts extend it. The draft row that samples the next token and the target row
it is verified against are functions of the whole context (committed tokens
followed by the drafts before that position), R01. Besides the drafts, a
policy may read what is fixed before the round draws: the committed history,
the load measured before drawing, and the prior rounds (R36).

Confidences are values a drafter computes as it drafts. The confidence ``c_j``
of position ``j`` estimates whether ``x_j`` will be accepted; it is computed
from the state after ``x_(j-1)``, so it encodes ``x_1..x_(j-1)``. By default it
is the exact acceptance rate of that position, ``sum_v min(p(v), q(v))``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Mapping, Sequence

from qconform.spec.allocation import allocate_dense
from qconform.spec.constants import M
from qconform.spec.errors import refuse
from qconform.spec.qrow import QRow
from qconform.spec.rules import defines
from qconform.spec.verification import check_target_row, check_target_shapes

Context = tuple[int, ...]


@defines("R11", "R37")
def acceptance_rate(p_row: Sequence[Fraction], q_row: QRow) -> Fraction:
    """``sum_v min(p(v), q(v))``: the probability that a draft from ``q_row`` is accepted.

    With a real uniform, ``x`` is proposed with ``q(x)`` and accepted with
    ``min(1, p(x)/q(x))``; the product is ``min(p(x), q(x))``.
    """
    return sum((min(Fraction(p), q_row.q(v)) for v, p in enumerate(p_row)), Fraction(0))


@dataclass(frozen=True)
class Scenario:
    """The vocabulary, the most drafts a round may hold, the rows, and the inputs fixed before drawing.

    ``draft_row(context)`` is the q row that samples the token after ``context``,
    ``target_row(context)`` the exact target row there. ``confidence_of(context)``
    is the drafter's confidence for the position after ``context`` (default: the
    acceptance rate there).
    """

    name: str
    vocab: int
    max_depth: int
    draft_row: Callable[[Context], QRow]
    target_row: Callable[[Context], Sequence[Fraction]]
    history: Context = ()
    load: int = 1
    confidence_of: Callable[[Context], Fraction] | None = None
    #: validated rows by context (the row callables must be deterministic)
    checked: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.max_depth, int) or isinstance(self.max_depth, bool) or self.max_depth < 0:
            raise refuse("BAD_SHAPE", f"maximum depth {self.max_depth!r} is not a nonnegative integer")

    @defines("R01")
    def q(self, context: Context) -> QRow:
        """The draft row after ``context``; BAD_SHAPE if it is not a QRow over the vocabulary."""
        key = ("q", context)
        if key not in self.checked:
            row = self.draft_row(context)
            if not isinstance(row, QRow) or row.vocab != self.vocab:
                raise refuse("BAD_SHAPE", f"draft row after {context} is not a QRow over {self.vocab} tokens")
            self.checked[key] = row
        return self.checked[key]

    @defines("R08")
    def draft_shares(self, context: Context) -> list[Fraction]:
        """``c_v / M`` for every token: the law of the draft after ``context`` (exact, R08)."""
        key = ("shares", context)
        if key not in self.checked:
            row = self.q(context)
            self.checked[key] = tuple(Fraction(row.count(v), M) for v in range(self.vocab))
        return list(self.checked[key])

    @defines("R10")
    def p(self, context: Context) -> list[Fraction]:
        """The exact target row after ``context`` (R10)."""
        key = ("p", context)
        if key not in self.checked:
            row = [Fraction(value) for value in self.target_row(context)]
            check_target_row(row, self.vocab)
            self.checked[key] = tuple(row)
        return list(self.checked[key])

    @defines("R36")
    def confidence(self, context: Context) -> Fraction:
        """The drafter's confidence for the position after ``context``."""
        if self.confidence_of is None:
            return acceptance_rate(self.p(context), self.q(context))
        return Fraction(self.confidence_of(context))


@defines("R01")
def row_key(context: Context) -> str:
    """The key of a Markov row: ``""`` for the empty context, else the last token's ID."""
    return str(context[-1]) if context else ""


@defines("R01")
def row_keys(vocab: int) -> list[str]:
    """``""`` and every token ID: the keys of a Markov scenario's rows."""
    return [""] + [str(v) for v in range(vocab)]


@defines("R01")
def check_row_keys(vocab: int, q_rows: Mapping[str, object], p_rows: Mapping[str, object]) -> None:
    """Refuse (BAD_SHAPE) q or p rows not keyed by exactly :func:`row_keys`: the shape of a Markov
    scenario, judged before any row's values (``refusal_order.ADMISSION_REFUSALS`` row 1)."""
    for what, table in (("q", q_rows), ("p", p_rows)):
        if sorted(table) != sorted(row_keys(vocab)):
            raise refuse("BAD_SHAPE", f"{what} rows keyed {sorted(table)}, expected {row_keys(vocab)}")


@defines("R01", "R36")
def markov_scenario(
    name: str,
    vocab: int,
    max_depth: int,
    q_rows: Mapping[str, QRow],
    p_rows: Mapping[str, Sequence[Fraction]],
    history: Context = (),
    load: int = 1,
) -> Scenario:
    """A scenario whose rows depend on the last token of the context only (:func:`row_key`).

    Both tables need every key of :func:`row_keys`; each row is validated here, in the order of
    ``refusal_order.ADMISSION_REFUSALS``: the keys, then every p row's length, then each row's values.
    """
    check_row_keys(vocab, q_rows, p_rows)
    check_target_shapes([len(p_rows[key]) for key in row_keys(vocab)], vocab)
    scenario = Scenario(
        name=name,
        vocab=vocab,
        max_depth=max_depth,
        draft_row=lambda context: q_rows[row_key(context)],
        target_row=lambda context: p_rows[row_key(context)],
        history=tuple(history),
        load=load,
    )
    for key in row_keys(vocab):
        context = () if key == "" else (int(key),)
        scenario.q(context)
        scenario.p(context)
    return scenario


@defines("R06")
def dyadic_row(weights: Sequence[int]) -> QRow:
    """The dyadic24 row allocated for integer weights (R06)."""
    return QRow.dense(allocate_dense([Fraction(w) for w in weights]).counts)


@defines("R10")
def exact_row(weights: Sequence[int]) -> list[Fraction]:
    """The exact target row ``w_v / sum(w)`` of integer weights."""
    total = sum(weights)
    return [Fraction(w, total) for w in weights]


@defines("R35", "R36")
def standard_scenarios(vocab: int, max_depth: int) -> list[Scenario]:
    """The auditor's standard scenarios at one vocabulary and depth.

    * ``q-equals-p``: q = p, the dyadic24 allocation of the uniform row (at V = 2
      exactly uniform: the setting of the toy regression, R38);
    * ``markov``: non-dyadic p and a different q, both depending on the last token;
    * ``partial-support``: q on two tokens only, p zero on q's likeliest token.
    """
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 2:
        raise refuse("BAD_SHAPE", f"vocabulary {vocab!r} is not an integer >= 2")
    uniform = dyadic_row([1] * vocab)
    shifts = {key: (0 if key == "" else int(key) + 1) for key in row_keys(vocab)}
    equal_q = {key: uniform for key in shifts}
    equal_p = {key: [uniform.q(v) for v in range(vocab)] for key in shifts}
    markov_q = {
        k: dyadic_row([(1 + (vocab - 1 - v + s) % vocab) ** 2 for v in range(vocab)]) for k, s in shifts.items()
    }
    markov_p = {k: exact_row([1 + (v + s) % vocab for v in range(vocab)]) for k, s in shifts.items()}
    partial_q = {
        k: dyadic_row([{s % vocab: 3, (s + 1) % vocab: 1}.get(v, 0) for v in range(vocab)]) for k, s in shifts.items()
    }
    partial_p = {k: exact_row([0 if v == s % vocab else 1 + v for v in range(vocab)]) for k, s in shifts.items()}
    tables = (
        ("q-equals-p", equal_q, equal_p),
        ("markov", markov_q, markov_p),
        ("partial-support", partial_q, partial_p),
    )
    return [
        markov_scenario(f"{name}-v{vocab}-k{max_depth}", vocab, max_depth, q_rows, p_rows)
        for name, q_rows, p_rows in tables
    ]
