"""What a project's folders and this machine say, read from disk.

The fleet a run uses (``gpu_targets.yaml``, or the built-in fleet of this machine, scanned), a model's
``farm.yaml`` with the profiles and data files beside it, and the files ``trtfarm init`` writes. The vocabulary
names these values; this package reads them.
"""
