"""Optimization profiles: the profile model, shape logs, derivation from traffic."""
