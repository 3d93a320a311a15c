"""Building plans: the build of one job, refit, timing caches, progress sinks."""
