"""What serving code imports: the profile router (and, on GPU hosts, the plan loader)."""

from trtfarm.runtime.router import Route, Router, ShapeOutOfRange

__all__ = ["Route", "Router", "ShapeOutOfRange"]
