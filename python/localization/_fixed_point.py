"""The iterated local mean on the Python side: the one loop that moves rows until they stop.

The native core's iterations (MeanShift's climbs, blurring mean shift, the fixed-kernel
diffusion) run in ``rust/algorithms/fixed_point.rs``. The iterations whose step is
composed in Python — PC-Shift's projected step, the self-local mean of (X, y) samples,
label propagation's clamped distributions — run here: the active set, the count of
steps, the stopping rule and the progress bar live in :func:`iterate`, and each method
supplies only its step.
"""

from __future__ import annotations

import numpy as np

from ._progress import Progress


def iterate(update, Y, max_iter, tol, *, whole=False, desc="iterations", unit="pt", verbose=False):
    """Move the rows of ``Y`` in place by ``update`` until they stop; returns ``(n_iter, converged)``.

    ``update(idx, Y)`` returns ``(new, moved, valid)`` for the rows ``idx`` still moving: their
    new values, how far each moved in the units of ``tol`` (with ``whole``: one number for the
    set), and which rows could take their step (None: all). A row stops once it moved less
    than ``tol`` (converged) or when its step was invalid (not converged); with ``whole`` the
    set moves and stops together. Rows that are not finite at the start never move. At most
    ``max_iter`` steps are taken; ``converged`` says, per row, whether it stopped within tol.
    The bar counts stopped rows, or iterations with ``whole``.
    """
    active = np.all(np.isfinite(Y), axis=1)
    converged = np.zeros(len(Y), dtype=bool)
    n_iter = 0
    with Progress(verbose, desc, unit="it" if whole else unit, total=max_iter if whole else len(Y)) as bar:
        while n_iter < max_iter and np.any(active):
            n_iter += 1
            idx = np.flatnonzero(active)
            new, moved, valid = update(idx, Y)
            Y[idx] = new
            if whole:
                if not moved >= tol:
                    converged[idx] = True
                    active[:] = False
                bar.update()
                continue
            done = ~(moved >= tol)
            if valid is not None:
                converged[idx[done & valid]] = True
                done |= ~valid
            else:
                converged[idx[done]] = True
            active[idx[done]] = False
            bar.update(int(np.count_nonzero(done)))
    return n_iter, converged
