"""What a machine has: its GPUs, the toolchain versions it can import, and what a plan's header says it needs."""
