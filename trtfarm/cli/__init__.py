"""The ``trtfarm`` command line: one module per command group, shared options in ``common``.

Only the farm commands (``farm``, ``pools``, ``worker``, ``webhook``) import Prefect, inside the command.
"""
