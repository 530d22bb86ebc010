"""SPEC §10, experiment 2 (MeanShift part): trajectories to the modes of generated 2-D data,
and a MeanShift image segmentation. Writes meanshift_meanshift.png and meanshift_segmentation.png.

    python examples/meanshift.py [--output meanshift.png] [--no-plot]
"""

import argparse

from localization.cli import demo_meanshift_segmentation, demo_meanshift_trajectories

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", default="meanshift.png", help="figure name stem (two PNGs are written)")
    p.add_argument("--no-plot", action="store_true")
    args = p.parse_args()
    demo_meanshift_trajectories(args)
    print()
    demo_meanshift_segmentation(args)
