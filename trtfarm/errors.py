"""Exception types shared across trtfarm.

``UserInputError`` marks problems with what the user gave us (a model, a file, a flag): they are reported with the
fix, recorded as a failed target and never retried. Anything else is an infrastructure failure or a bug.
"""

from __future__ import annotations


class TrtfarmError(Exception):
    """Base class for every error trtfarm raises on purpose."""


class UserInputError(TrtfarmError):
    """Bad input: the message names the problem and how to fix it. Retrying does not help."""


class ConfigError(UserInputError):
    """A configuration file (gpu_targets.yaml, farm.yaml) is malformed."""


class StoreError(TrtfarmError):
    """The artifact store refused or failed an operation."""


class IntegrityError(StoreError):
    """Stored bytes do not match the sha256 recorded for them."""
