"""Engine validation and benchmarking: comparisons, latency statistics, tactics, regressions.

Everything here runs on CPU except ``engine_gpu``, the one module that executes plans (on the target GPU).
"""
