"""A corpus of ONNX models that nobody on this project wrote (see ``sources`` and ``exported``) and the conformance
matrix that runs every model-reading path of trtfarm on them (``matrix``)."""
