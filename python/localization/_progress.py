"""Progress bars: the one place the library draws them.

Every call that can run for more than a second takes ``verbose`` (estimators, the
scikit-learn convention) or ``progress`` (functions); both mean "show a bar on stderr".
A bar appears only once the call has lasted :data:`DELAY` seconds, so quick calls print
nothing, and it is closed when the call ends, successful or not: on a terminal it is
erased, elsewhere (a log file, a captured stream) its last state is left on a line of its
own, so the next line printed never continues it.

Native calls report ``(done, total)`` through the callback :attr:`Progress.report` every
few tens of milliseconds; Python loops call :meth:`Progress.update`. Either way the bar
advances by increments (tqdm's own ``update``), which is what keeps its delay and its
bookkeeping of what was displayed right.
"""

from __future__ import annotations

import sys

#: Seconds a call runs before its bar appears.
DELAY = 0.2


class Progress:
    """A progress bar, or nothing when ``enabled`` is false (then every method is a no-op
    and :attr:`callback` is None, so the native core is not called back at all).

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, enabled, desc, unit="it", total=None):
        self._bar = None
        if enabled:
            from tqdm.auto import tqdm

            stream = sys.stderr
            tty = bool(getattr(stream, "isatty", lambda: False)())
            self._bar = tqdm(desc=desc, total=total, unit=unit, file=stream, delay=DELAY, leave=not tty)

    @property
    def callback(self):
        """``report`` for the native core's ``progress=`` argument, None when disabled."""
        return None if self._bar is None else self.report

    def report(self, done, total):
        """The native core's report: ``done`` of ``total`` units so far."""
        bar = self._bar
        if bar is None:
            return
        if bar.total != total:
            bar.total = total
        if done > bar.n:
            bar.update(done - bar.n)

    def update(self, k=1, **postfix):
        """``k`` more units done; ``postfix`` values (e.g. a loss) are shown after the bar."""
        if self._bar is not None:
            if postfix:
                self._bar.set_postfix(postfix, refresh=False)
            self._bar.update(k)

    def close(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def progress_bar(enabled, desc, unit="it"):
    """A ``(callback, close)`` pair: the callback (None when disabled) takes the native core's
    ``(done, total)`` reports."""
    bar = Progress(enabled, desc, unit)
    return bar.callback, bar.close
