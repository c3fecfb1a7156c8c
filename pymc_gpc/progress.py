"""Progress of loops: PyMC's bar over a loop of known length (predictions over draws),
an open-ended display for fits (iterations and the change of the objective), and plain
lines for a log file (sampling and fits when stderr is not a terminal)."""

import contextlib
import sys
import time

from pymc.progress_bar import create_simple_progress

__all__ = ["Progress", "Iterations", "LogLines", "log_mode", "sampler_log_lines", "LOG_EVERY"]

# Seconds between two plain progress lines when stderr is not a terminal.
LOG_EVERY = 10.0


def log_mode(progressbar, stream=None):
    """Whether progress asked for (``progressbar`` truthy) goes out as plain lines: the
    stream (default ``sys.stderr``) is not a terminal (a log file, a pipe)."""
    stream = sys.stderr if stream is None else stream
    if not progressbar:
        return False
    isatty = getattr(stream, "isatty", None)
    return not (isatty is not None and isatty())


def _clock(seconds):
    """``h:mm:ss`` of a number of seconds."""
    seconds = int(round(max(seconds, 0.0)))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class LogLines:
    """Plain progress lines, at most one every ``every`` seconds (and the last one): done /
    total, a note (e.g. divergences so far), the elapsed time and, with a total, the time
    left at the mean rate since the first report (so that compilation and start-up before
    the first step do not count as the time a step takes; no estimate until a step has
    been reported after the first).

    Thread-safe enough for a sampler's callback thread: a line is one ``write`` call.
    """

    def __init__(self, label, total=None, every=LOG_EVERY, stream=None, unit="draws"):
        self.label, self.total, self.every, self.unit = label, total, every, unit
        self.stream = sys.stderr if stream is None else stream
        self.start = time.monotonic()
        self.last = None  # when the last line was written
        self.latest = self.written = None  # (done, note) last reported, last written
        self.first = None  # (time, done) of the first report: the rate is measured from it

    def finish(self):
        """Write the last state reported if its line is not out yet."""
        if self.latest is not None and self.latest != self.written:
            self.update(*self.latest, force=True)

    def update(self, done, note="", force=False):
        """Report ``done`` steps; writes a line when ``every`` seconds have passed since the
        last, at the first call, when ``done`` reaches the total, or with ``force``."""
        now = time.monotonic()
        if self.first is None:
            self.first = (now, done)
        self.latest = (done, note)
        finished = self.total is not None and done >= self.total and self.latest != self.written
        if not (force or finished or self.last is None or now - self.last >= self.every):
            return False
        self.last, self.written = now, self.latest
        self.stream.write(self.line(done, note, now - self.start, self._left(done, now)) + "\n")
        self.stream.flush()
        return True

    def _left(self, done, now):
        """Seconds left at the mean rate since the first report, or None (no total, or no
        step reported after the first)."""
        t0, done0 = self.first
        if self.total is None or not done0 < done < self.total:
            return None
        return (now - t0) * (self.total - done) / (done - done0)

    def line(self, done, note, elapsed, left=None):
        """The text of one line."""
        parts = [f"{self.label}: {done}" + (f"/{self.total}" if self.total is not None else "") + f" {self.unit}"]
        if note:
            parts.append(note)
        parts.append(f"elapsed {_clock(elapsed)}")
        if left is not None:
            parts.append(f"about {_clock(left)} left")
        return ", ".join(parts)


class Progress:
    """``pymc.progress_bar.create_simple_progress`` as a context manager; silent when
    ``progressbar`` is False."""

    def __init__(self, label, total, progressbar):
        self.label, self.total = label, total
        self.bar = create_simple_progress(progressbar)

    def __enter__(self):
        self.bar.__enter__()
        self.task = self.bar.add_task(self.label, completed=0, total=self.total)
        return self

    def __exit__(self, *exc):
        self.bar.__exit__(*exc)

    def advance(self):
        """One step done."""
        self.bar.update(self.task, advance=1)

    def show(self, completed, note):
        """``completed`` steps done, with ``note`` after the label (e.g. the log evidence)."""
        self.bar.update(self.task, refresh=True, completed=completed, description=f"{self.label}: {note}")


class Iterations:
    """Progress of an iterative fit whose length is not known in advance: the iteration,
    the objective and its change in the last iteration, and the elapsed time; no share
    of an iteration cap (a fit converging after 24 of 1000 allowed iterations is not
    "2 % done"). A rich line in a terminal; plain ``LogLines`` every ``LOG_EVERY``
    seconds otherwise; nothing when ``progressbar`` is False.

    Use: ``with Iterations("MAP-II", progressbar) as bar: bar.show(it, value, "log evidence")``.
    """

    def __init__(self, label, progressbar, stream=None, every=LOG_EVERY):
        self.label = label
        self.log = LogLines(label, None, every, stream, unit="iterations") if log_mode(progressbar, stream) else None
        self.bar = None if self.log is not None or not progressbar else self._rich(stream)
        self.value = None  # the objective at the previous call

    @staticmethod
    def _rich(stream):
        from rich.console import Console
        from rich.progress import Progress as RichProgress
        from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

        return RichProgress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                            console=Console(file=sys.stderr if stream is None else stream))

    def __enter__(self):
        if self.bar is not None:
            self.bar.__enter__()
            self.task = self.bar.add_task(self.label, total=None)
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)
        elif self.log is not None:
            self.log.finish()
        return False

    def show(self, iteration, value, name="objective"):
        """After iteration ``iteration``: ``name`` is now ``value`` (its change since the
        previous call shown after it)."""
        value = float(value)
        change = "" if self.value is None else f" (change {value - self.value:+.2e})"
        self.value = value
        note = f"{name} {value:.4f}{change}"
        if self.log is not None:
            self.log.update(iteration, note)
        elif self.bar is not None:
            self.bar.update(self.task, refresh=True, description=f"{self.label}: iteration {iteration}, {note}")


# pm.sample's defaults for the number of draws and tuning steps per chain.
PYMC_DRAWS, PYMC_TUNE = 1000, 1000


@contextlib.contextmanager
def sampler_log_lines(args, kwargs, stream=None, every=LOG_EVERY):
    """``pm.sample``'s keyword arguments with plain progress lines (``LogLines``: draws done,
    divergences after tuning, elapsed, time left) written to ``stream`` (default
    ``sys.stderr``) when it is not a terminal and progress is asked for (the rich bar is then
    off). Yields the keyword arguments to use.

    PyMC's sampler: through its per-draw ``callback`` (composed with one given). nutpie: a
    subclass of its ``NutpieProgressBarManager`` swapped in for the block (not thread-safe).
    Other samplers: unchanged.
    """
    if not log_mode(kwargs.get("progressbar", True), stream) or kwargs.get("nuts_sampler") not in ("pymc", "nutpie"):
        yield kwargs
        return
    draws = args[0] if args else kwargs.get("draws", PYMC_DRAWS)
    tune = kwargs.get("tune", PYMC_TUNE)
    lines = LogLines("Sampling", kwargs["chains"] * (draws + tune), every, stream)
    kwargs = {**kwargs, "progressbar": False}
    if kwargs["nuts_sampler"] == "pymc":
        kwargs["callback"] = _draw_counter(lines, kwargs.get("callback"))
        yield kwargs
    else:
        with _nutpie_lines(lines):
            yield kwargs
    lines.finish()


def _draw_counter(lines, user_callback):
    """A ``pm.sample`` callback counting draws and divergences after tuning into ``lines``."""
    count = {"draws": 0, "divergences": 0}

    def callback(trace, draw):
        count["draws"] += 1
        stats = draw.stats if isinstance(draw.stats, list) else [draw.stats]
        if not draw.tuning and any(bool(s.get("diverging", False)) for s in stats):
            count["divergences"] += 1
        lines.update(count["draws"], f"{count['divergences']} divergences")
        if user_callback is not None:
            user_callback(trace=trace, draw=draw)

    return callback


@contextlib.contextmanager
def _nutpie_lines(lines):
    """Within this block ``pm.sample``'s nutpie progress manager also writes ``lines``."""
    from pymc.sampling import mcmc

    base = mcmc.NutpieProgressBarManager

    class LoggedManager(base):
        def update(self, chain_progresses):
            super().update(chain_progresses)
            done = sum(int(cp.finished_draws) for cp in chain_progresses)
            divergences = sum(int(cp.divergences) for cp in chain_progresses)
            lines.update(done, f"{divergences} divergences")

    mcmc.NutpieProgressBarManager = LoggedManager
    try:
        yield
    finally:
        mcmc.NutpieProgressBarManager = base
