"""Planning a run: what one run does for one model export (targets, precision step, jobs), and its parameters."""
