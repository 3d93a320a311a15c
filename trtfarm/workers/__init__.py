"""Worker machines: admission check, work pools, images, Kubernetes templates, a worker's identity."""
