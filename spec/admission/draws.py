"""The options of every draw of a round, each computed once per context (R08, R11, R33).

A proposal draws ``x`` with ``c_x / M`` (exact, R08). Verification accepts a
draft with ``draws.accept(p(x), q(x))``, draws a correction from the
full-vocabulary residual ``max(p - q, 0)`` (R33), or a bonus from the target
row, each with ``draws.categorical`` (real uniform: ``r_v / R``).
"""

from __future__ import annotations

from qconform.spec.admission.choices import Option, bernoulli_options, categorical_options
from qconform.spec.admission.scenario import Context, Scenario
from qconform.spec.distribution import DrawModel
from qconform.spec.rules import defines
from qconform.spec.verification import residual_row


class DrawOptions:
    """The options of each draw in ``scenario`` under the draw model ``draws``, memoized by context."""

    def __init__(self, scenario: Scenario, draws: DrawModel) -> None:
        self.scenario = scenario
        self.draws = draws
        self.memo: dict[tuple, list[Option]] = {}

    @defines("R08")
    def proposal(self, context: Context) -> list[Option]:
        """The draft after ``context``: each token of positive count, with ``c_x / M``."""
        key = ("proposal", context)
        if key not in self.memo:
            self.memo[key] = categorical_options(self.scenario.draft_shares(context))
        return self.memo[key]

    @defines("R11")
    def acceptance(self, context: Context, token: int) -> list[Option]:
        """Accept (``True``) or reject the draft ``token`` drawn after ``context``."""
        key = ("accept", context, token)
        if key not in self.memo:
            p_row, q_row = self.scenario.p(context), self.scenario.q(context)
            self.memo[key] = bernoulli_options(self.draws.accept(p_row[token], q_row.q(token)))
        return self.memo[key]

    @defines("R11", "R33")
    def correction(self, context: Context) -> list[Option]:
        """A token of the full-vocabulary residual ``max(p - q, 0)`` after ``context``."""
        key = ("correction", context)
        if key not in self.memo:
            residual = residual_row(self.scenario.p(context), self.scenario.q(context))
            self.memo[key] = categorical_options(self.draws.categorical(residual))
        return self.memo[key]

    @defines("R11")
    def bonus(self, context: Context) -> list[Option]:
        """A token of the target row after ``context`` (target-only when nothing was admitted)."""
        key = ("bonus", context)
        if key not in self.memo:
            self.memo[key] = categorical_options(self.draws.categorical(self.scenario.p(context)))
        return self.memo[key]
