"""Throughput-scored schedulers of DSpark v1 appendix A (R37), on the reconstructed rows.

    qconform audit-policy examples/policies/dspark.py:appendix_a_scheduler   # FAIL: 9/20 against 3/10
    qconform audit-policy examples/policies/dspark.py:prefix_scan            # pass
    qconform audit-policy examples/policies/dspark.py:prefix_scan_sampled    # FAIL: reads q(x_i) before admitting i

``appendix_a_scheduler`` drafts the block, reads every confidence and picks the
depth of best score (S(0) = 1, S(1) = 0.9, S(2) = 1.134 or 0.81 by x1).
``prefix_scan`` stops at the first depth whose score does not improve; with the
position confidences c_1..c_i it is a sequential stopping rule.
``prefix_scan_sampled`` is the same scan scored by the sampled tokens' own
q(x_i), under a lighter load where it does admit drafts.
"""

from qconform.spec.admission import (
    DSPARK_SPS,
    LIGHT_LOAD_SPS,
    dspark_appendix_a_scenario,
    dspark_appendix_a_scheduler,
    prefix_scheduler,
    sampled_confidence_scenario,
)

appendix_a_scheduler = dspark_appendix_a_scheduler()
prefix_scan = prefix_scheduler(DSPARK_SPS)
prefix_scan_light_load = prefix_scheduler(LIGHT_LOAD_SPS)
prefix_scan_sampled = prefix_scheduler(LIGHT_LOAD_SPS, sampled_token_confidence=True)

AUDIT_SCENARIOS = [dspark_appendix_a_scenario, sampled_confidence_scenario]
