"""Publishing: manifests, atomic publish, releases, the model registry, gc, the catalogue, attestations."""
