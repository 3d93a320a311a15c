"""Publishing: store key layout, manifests, atomic publish, releases, pull, gc, the catalogue."""
