"""The toy selection-bias regression (R38): admit the first draft only when it is token 0.

    qconform audit-policy examples/policies/toy_biased.py:policy --depth 1 --horizon 1

The audit reports token 0 at 3/4 against the target 1/2 (q = p uniform over two
tokens), and the premature read of x1 before admitting it. The same policy
written by hand, as a user would write one:
"""

from qconform.spec.admission import ADMIT, STOP, toy_selection_scenario


def policy(view):
    """Admit x1 only when it is token 0; never a second draft."""
    if view.step == 1 and view.draft(1) == 0:
        return ADMIT
    return STOP


AUDIT_SCENARIOS = [toy_selection_scenario]
