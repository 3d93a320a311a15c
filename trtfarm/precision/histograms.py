"""onnxruntime's calibration histograms, made right and in parallel: 6 and 10 of ``workarounds``.

``HistogramCollector``, which ModelOpt's int8 calibration drives, gets these replacements while a conversion runs,
installed with the others (``workarounds._install``).

Each replaces a function of onnxruntime 1.32.0 as nvidia-modelopt 0.47.0 calls it (``library_versions.COMPARED``);
tests/precision/test_workarounds.py compares each with onnxruntime's own.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def wide_merge(merge):
    """6. onnxruntime 1.32.0's ``HistogramCollector.merge_histogram``, again in float64 where float32 bins overflow.

    ModelOpt 0.47.0's int8 calibration calls it for every batch after the first.

    The merge's range is the tensor's threshold as a float32. A tensor that holds float32's lowest value (a decoder's
    additive attention mask, as the dynamo exporter writes GPT-2's) has a threshold of 3.4e38: numpy spaces the bins
    in float32, the range's width overflows to inf, and ``np.histogram`` raises "Too many bins for data range". The
    same merge then runs with the thresholds as Python floats (bins spaced in float64, as ModelOpt does for a
    tensor's first histogram; its PR NVIDIA/Model-Optimizer#1558 casts its own ``_collect_value``'s range the same
    way). A merge that works is onnxruntime's own, unchanged.
    """

    def merge_histogram(self, old_histogram, data_arr, new_min, new_max, new_threshold):
        """The merge onnxruntime does; when float32 bins overflow, the same merge with thresholds as Python floats."""
        try:
            return merge(self, old_histogram, data_arr, new_min, new_max, new_threshold)
        except ValueError as err:
            if "Too many bins" not in str(err):
                raise
        wide = (*old_histogram[:4], float(old_histogram[4]))
        return merge(self, wide, data_arr, new_min, new_max, float(new_threshold))

    return merge_histogram


def split_collect(collect):
    """10. onnxruntime 1.32.0's ``HistogramCollector.collect``, the tensors split across threads.

    It calls ModelOpt 0.47.0's ``_collect_value`` (ModelOpt's patch of onnxruntime's) for each tensor.

    int8 calibration makes each batch's histogram of every tensor in one loop: 1-2 s of the step on a 2-core machine
    while one core waits. Each tensor's histogram reads and writes that tensor's entry only, and numpy releases the
    interpreter lock while it counts, so the tensors are split in parts of about equal size, one per CPU (at most 4),
    each given to the same ``collect_value`` in a thread of its own; the entries are then put back in the order one
    loop would have written them. With one CPU, or one tensor, the loop runs as it is.
    """

    def collect_in_parts(self, name_to_arr):
        """The ``collect`` of onnxruntime, the tensors split across threads (one part per CPU): the same histograms."""
        cpus = min(len(os.sched_getaffinity(0)), 4)
        if self.method not in {"distribution", "entropy"} or cpus < 2 or len(name_to_arr) < 2:
            return collect(self, name_to_arr)
        sizes = {name: sum(int(np.size(a)) for a in arrs) for name, arrs in name_to_arr.items()}
        parts: list[dict] = [{} for _ in range(cpus)]
        loads = [0] * cpus
        for name in sorted(name_to_arr, key=lambda n: -sizes[n]):  # largest first, each to the lightest part
            i = loads.index(min(loads))
            parts[i][name] = name_to_arr[name]
            loads[i] += sizes[name]
        order = [*self.histogram_dict, *(n for n in name_to_arr if n not in self.histogram_dict)]
        with ThreadPoolExecutor(max_workers=cpus) as pool:
            for done in [pool.submit(self.collect_value, part) for part in parts if part]:
                done.result()
        written = dict(self.histogram_dict)
        self.histogram_dict.clear()
        self.histogram_dict.update({n: written[n] for n in order if n in written})
        self.histogram_dict.update({n: v for n, v in written.items() if n not in self.histogram_dict})

    return collect_in_parts
