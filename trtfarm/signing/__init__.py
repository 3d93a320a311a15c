"""Signing and verifying what the farm publishes, with ``cryptography`` alone.

OpenSSF model-signing bundles (a Sigstore bundle v0.3 holding a DSSE envelope of an in-toto statement) and in-toto
statements for provenance.

This package sits below ``publishing``, ``building`` and ``runtime``: it imports nothing of trtfarm but ``errors``,
so a serving host's ``load_plan`` pulls in no more than ``cryptography`` to check a signature. docs/signing.md says
why this format and not a home-made one.
"""
