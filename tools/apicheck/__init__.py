"""trtfarm's TensorRT code checked against NVIDIA's own Python bindings of each supported version (a dev-only tool).

``surface`` fetches a version's bindings wheel and dumps its API through a null libnvinfer, ``uses`` and
``records`` find every TensorRT API use in trtfarm's source, ``check`` compares them. The tests
(``tests/toolchain/test_tensorrt_api.py``) and ``bench/tensorrt_api.py`` run it; trtfarm itself never imports it, so
the package serving hosts install does not carry it (pyproject's package list names trtfarm, flows and tasks).
"""
