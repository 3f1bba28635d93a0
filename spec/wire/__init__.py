"""qconform.spec.wire: the normative byte layout of wire v2 (R12-R21, R24, R25, R27, R28).

The design names the v2 messages and their invariants; this subpackage fixes the
bytes. ``layout`` holds every field as data, ``header`` the framing, ``messages``
the decoded messages, ``codec`` the pure encode/decode, ``validation`` the
stateless checks against the negotiated HELLO, ``negotiation`` HELLO against the
receiver's own configuration, ``receiver`` the session state machine of the
target's side, ``worker`` that of the drafter leader's side, and ``reasons`` the
stable reason code of every rejection. docs/wire-v2.md is the
same layout in prose and tables.
"""
