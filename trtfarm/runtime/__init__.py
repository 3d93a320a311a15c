"""What serving code imports: ``from trtfarm.runtime import Router, load_plan``.

The router picks a profile for each request's shapes; the loader refuses a plan that is not this host's.
"""

from trtfarm.runtime.loader import PlanMismatch, contexts_that_fit, load_plan
from trtfarm.runtime.router import Route, Router, ShapeOutOfRange

__all__ = ["PlanMismatch", "Route", "Router", "ShapeOutOfRange", "contexts_that_fit", "load_plan"]
