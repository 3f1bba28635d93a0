"""What a target sends after verifying a round: the COMMIT's fields (R16, R17).

The endpoint's own rule (it never imports the spec), used by the target when it
commits a round and by the verifier when it answers a ``wire_frames`` encoding
case in ``outcome`` form.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import layout


def commit_fields(anchor: int, accepted: int, emitted: Sequence[int]) -> tuple[int, int, int]:
    """The COMMIT's ``(accepted, token, new_committed)`` for a verified round (docs/wire-v2.md, COMMIT).

    The round emitted its ``accepted`` drafts, then a correction or bonus token
    (the COMMIT's token) unless emission ended early at a stop token or the
    budget on the last accepted draft (token -1). The committed position moves
    past every emitted token, modulo 2^32.
    """
    if len(emitted) not in (accepted, accepted + 1) or not emitted:
        raise ValueError(f"{len(emitted)} tokens emitted with {accepted} accepted is no round outcome")
    token = emitted[-1] if len(emitted) == accepted + 1 else layout.NO_TOKEN
    return accepted, token, (anchor + len(emitted)) % layout.POSITIONS
