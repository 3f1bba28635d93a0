"""Depth admission must not inspect its own future draws (R35-R38).

* :mod:`.policy`: the fixed-depth reference (R35) and the sequential
  stopping-rule interface (R36);
* :mod:`.reveal`: drafts revealed lazily, values tagged with the drafts they encode;
* :mod:`.choices`: exact enumeration of a finite random procedure;
* :mod:`.scenario`: the rows and inputs a policy is audited in;
* :mod:`.audit`: the exact auditor (law beside the target, premature reads);
* :mod:`.table`: decision tables, the declarative policy language of the vectors;
* :mod:`.schedulers`: throughput-scored schedulers (global selection, prefix scan);
* :mod:`.counterexamples`: the toy selection bias (R38) and DSpark appendix A (R37).
"""

from qconform.spec.admission.audit import (
    Audit,
    MovedMass,
    Peek,
    audit_policy,
    first_token_moves,
    stream_law,
    target_law,
)
from qconform.spec.admission.counterexamples import (
    DSPARK_A1,
    DSPARK_C2,
    DSPARK_SPS,
    LIGHT_LOAD_SPS,
    dspark_appendix_a_mirrored_scenario,
    dspark_appendix_a_scenario,
    dspark_appendix_a_scheduler,
    sampled_confidence_scenario,
    toy_selection_policy,
    toy_selection_scenario,
)
from qconform.spec.admission.policy import ADMIT, STOP, AdmissionView, Policy, RoundRecord, block_policy, fixed_depth
from qconform.spec.admission.scenario import Scenario, acceptance_rate, markov_scenario, standard_scenarios
from qconform.spec.admission.schedulers import expected_tokens, global_best_depth, prefix_scheduler, throughput_score
from qconform.spec.admission.table import PolicyTable, TableStep, table_policy, tabulate_policy

__all__ = [
    "ADMIT",
    "STOP",
    "AdmissionView",
    "Audit",
    "DSPARK_A1",
    "DSPARK_C2",
    "DSPARK_SPS",
    "LIGHT_LOAD_SPS",
    "MovedMass",
    "Peek",
    "Policy",
    "PolicyTable",
    "RoundRecord",
    "Scenario",
    "TableStep",
    "acceptance_rate",
    "audit_policy",
    "block_policy",
    "dspark_appendix_a_mirrored_scenario",
    "dspark_appendix_a_scenario",
    "dspark_appendix_a_scheduler",
    "expected_tokens",
    "first_token_moves",
    "fixed_depth",
    "global_best_depth",
    "markov_scenario",
    "prefix_scheduler",
    "sampled_confidence_scenario",
    "standard_scenarios",
    "stream_law",
    "table_policy",
    "tabulate_policy",
    "target_law",
    "throughput_score",
    "toy_selection_policy",
    "toy_selection_scenario",
]
