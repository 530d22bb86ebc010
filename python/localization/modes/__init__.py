"""MedoidShift, QuickShift and PC-Shift: an import path kept for existing code.

They live in the mode-seeking family :mod:`localization.cluster`; import them from there.
"""

from ..cluster import MedoidShift, PCShift, QuickShift, medoid_shift, pc_shift, pc_shift_step, quick_shift

__all__ = ["MedoidShift", "QuickShift", "PCShift", "medoid_shift", "quick_shift", "pc_shift", "pc_shift_step"]
