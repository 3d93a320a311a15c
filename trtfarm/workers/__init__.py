"""Worker machines: GPU scan, admission check, work pools, images, Kubernetes templates."""
