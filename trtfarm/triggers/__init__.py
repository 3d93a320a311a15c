"""What starts a build: the model registry and the webhook receiver."""
