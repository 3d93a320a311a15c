"""Serving handoff: model repositories for inference servers (Triton) from the released plans."""
