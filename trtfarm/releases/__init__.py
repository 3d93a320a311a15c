"""Release channels as one ledger per (model, target, channel), decided by one pure state machine (``rules``)."""
