"""Building plans: the build of one job, refit, timing caches, the farm build's progress log."""
