"""The shared vocabulary: the fleet schema, build specs, models and exports, targets, jobs and outcomes.

The bottom of the core's packages above the plain utilities: everything that plans, builds, publishes or reports
speaks in these types, and nothing here imports those packages.
"""
