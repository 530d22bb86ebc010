"""The native thread pool seen from threadpoolctl.

threadpoolctl finds the native module among the loaded shared libraries (file name ``_core``,
confirmed by its exported symbols) and calls two C functions of it, so that
``threadpool_limits(1)`` bounds every ``n_jobs=None`` call of this library exactly as it
bounds BLAS and OpenMP. ``threadpool_info()`` lists it with ``user_api="localization"``.
"""

from __future__ import annotations

import threadpoolctl


class LocalizationController(threadpoolctl.LibController):
    user_api = "localization"
    internal_api = "localization"
    filename_prefixes = ("_core",)
    check_symbols = ("localization_get_num_threads", "localization_set_num_threads")

    def get_num_threads(self):
        return self.dynlib.localization_get_num_threads()

    def set_num_threads(self, num_threads):
        self.dynlib.localization_set_num_threads(int(num_threads))

    def get_version(self):
        from ._core import __version__

        return __version__


threadpoolctl.register(LocalizationController)
