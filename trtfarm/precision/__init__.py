"""Precision as a property of the ONNX, decided before any engine exists.

ModelOpt conversion (convert), the accuracy gate (gate, figures, runs), auto-pin, recipes, and the stored precision
step of a build (step).
"""
