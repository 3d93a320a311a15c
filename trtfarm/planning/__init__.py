"""What a run builds: the fleet, build specs, targets and their digests, the plan of a run."""
