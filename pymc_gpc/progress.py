"""PyMC's progress bar over a loop of known length (predictions over draws, fits)."""

from pymc.progress_bar import create_simple_progress

__all__ = ["Progress"]


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
