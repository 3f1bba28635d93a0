"""The reference wire v2 endpoint: an asyncio TCP worker (drafter leader) and verifier (receiver).

A candidate the harness judges, so it is written apart from the spec: it never
imports the executable spec (a test scans its imports). Its own CRC-32C, byte
layout, codec, q-row validation and receiver state machine live here; the
worker samples with the torch candidate (``qconform.adapters.torch_candidate``)
and the verifier verifies with it. docs/endpoint.md tells how to run them.
"""
