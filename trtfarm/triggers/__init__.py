"""What starts a build: the webhook receiver (S3 notifications through SNS, signed posts)."""
