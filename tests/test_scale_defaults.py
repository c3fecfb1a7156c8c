"""Defaults that scale (issue 60, part 2): parallel chains, progress readable in a log file,
a fit's progress by iterations."""

import io
import re

import numpy as np
import pytest

import pymc_gpc
from pymc_gpc import idata as I
from pymc_gpc import progress as P


class _Stop(Exception):
    pass


@pytest.fixture(scope="module")
def small_model():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((24, 2))
    y = (X[:, 0] + 0.3 * rng.standard_normal(24) > 0).astype(int)
    model, gp = pymc_gpc.ard_classifier(X, y, inducing=None)
    return model


def _sample_kwargs(monkeypatch, model, cores_available, **kwargs):
    """The keyword arguments ``pymc_gpc.sample`` hands to ``pm.sample`` with
    ``cores_available`` cores in the affinity mask (no sampling: pm.sample is replaced)."""
    seen = {}

    def fake_sample(*args, **kw):
        seen.update(kw)
        raise _Stop

    monkeypatch.setattr(I.os, "sched_getaffinity", lambda pid: set(range(cores_available)), raising=False)
    monkeypatch.setattr(I.os, "cpu_count", lambda: cores_available)
    monkeypatch.setattr(I.pm, "sample", fake_sample)
    with pytest.raises(_Stop):
        pymc_gpc.sample(model=model, progressbar=False, **kwargs)
    return seen


def test_two_chains_ask_for_two_cores_when_two_are_available(monkeypatch, small_model):
    kw = _sample_kwargs(monkeypatch, small_model, 2, chains=2, nuts_sampler="pymc")
    assert kw["cores"] == 2 and kw["chains"] == 2
    assert kw["mp_ctx"] == "forkserver"  # never fork the multi-threaded parent


def test_nutpie_chains_as_threads_on_the_available_cores(monkeypatch, small_model):
    pytest.importorskip("nutpie")
    kw = _sample_kwargs(monkeypatch, small_model, 2, chains=2, nuts_sampler="nutpie")
    assert kw["cores"] == 2
    assert "mp_ctx" not in kw


def test_one_core_samples_in_sequence_and_given_values_are_kept(monkeypatch, small_model):
    kw = _sample_kwargs(monkeypatch, small_model, 1, chains=2, nuts_sampler="pymc")
    assert kw["cores"] == 1 and "mp_ctx" not in kw
    kw = _sample_kwargs(monkeypatch, small_model, 8, chains=3, cores=2, mp_ctx="spawn", nuts_sampler="pymc")
    assert (kw["cores"], kw["chains"], kw["mp_ctx"]) == (2, 3, "spawn")


def test_default_chains_follow_the_cores_up_to_the_cap(monkeypatch, small_model):
    kw = _sample_kwargs(monkeypatch, small_model, 16, nuts_sampler="pymc")
    assert kw["cores"] == I.MAX_DEFAULT_CORES and kw["chains"] == I.MAX_DEFAULT_CORES
    kw = _sample_kwargs(monkeypatch, small_model, 1, nuts_sampler="pymc")
    assert kw["cores"] == 1 and kw["chains"] == 2


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _sampling_log(monkeypatch, total, start_up):
    """The lines of ``LogLines`` for a sampler that starts after ``start_up`` seconds and
    then takes 0.1 s a draw, reporting every draw."""
    clock = _Clock()
    monkeypatch.setattr(P.time, "monotonic", clock)
    out = io.StringIO()
    lines = P.LogLines("Sampling", total, every=10.0, stream=out)
    for done in range(1, total + 1):
        clock.t = start_up + done * 0.1
        lines.update(done, "0 divergences")
    return out.getvalue().splitlines()


def test_log_lines_every_few_seconds_with_time_left(monkeypatch):
    text = _sampling_log(monkeypatch, 400, start_up=0.0)
    # the first call, then one line per 10 s (100 draws), and the last
    assert len(text) == 5, text
    assert text[0].startswith("Sampling: 1/400 draws, 0 divergences, elapsed 0:00:00")
    assert text[1] == "Sampling: 101/400 draws, 0 divergences, elapsed 0:00:10, about 0:00:30 left"
    assert text[-1] == "Sampling: 400/400 draws, 0 divergences, elapsed 0:00:40"


def test_time_left_leaves_out_the_start_up_before_the_first_draw(monkeypatch):
    # compilation for 33 s before the first draw: the first line must not promise 18 hours,
    # and later lines extrapolate the drawing rate, not the compilation
    text = _sampling_log(monkeypatch, 2000, start_up=33.0)
    assert text[0] == "Sampling: 1/2000 draws, 0 divergences, elapsed 0:00:33", text[0]
    assert text[1] == "Sampling: 101/2000 draws, 0 divergences, elapsed 0:00:43, about 0:03:10 left"


def test_log_mode_only_off_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    assert P.log_mode(True, io.StringIO())
    assert not P.log_mode(True, Tty())
    assert not P.log_mode(False, io.StringIO())


def test_iterations_show_the_change_of_the_objective_not_a_share_of_a_cap():
    out = io.StringIO()
    with P.Iterations("MAP-II", True, stream=out, every=0.0) as bar:
        for it, value in enumerate([-120.0, -101.5, -100.25], start=1):
            bar.show(it, value, "log posterior")
    text = out.getvalue()
    assert "MAP-II: 3 iterations, log posterior -100.2500 (change +1.25e+00)" in text
    assert "%" not in text and "left" not in text


def test_fit_writes_plain_lines_to_a_log(small_model, capsys):
    pymc_gpc.fit(small_model, method="map", progressbar=True)
    err = capsys.readouterr().err
    assert re.search(r"MAP-II: \d+ iterations, log posterior -?\d+\.\d{4}", err), err
    assert "%" not in err


def _sampling_lines(err):
    return [line for line in err.splitlines() if line.startswith("Sampling: ")]


def test_pymc_sampling_writes_plain_lines_to_a_log(small_model, capsys):
    pymc_gpc.sample(draws=15, tune=15, chains=1, cores=1, nuts_sampler="pymc", random_seed=1,
                    model=small_model, progressbar=True, compute_convergence_checks=False)
    lines = _sampling_lines(capsys.readouterr().err)
    assert lines and lines[-1].startswith("Sampling: 30/30 draws, "), lines
    assert "divergences" in lines[-1]


@pytest.mark.slow  # a sampling run: CI only, not the between-edits tier
def test_nutpie_is_not_silent_in_a_log(small_model, capsys):
    pytest.importorskip("nutpie")
    pymc_gpc.sample(draws=15, tune=15, chains=2, nuts_sampler="nutpie", random_seed=1,
                    model=small_model, progressbar=True)
    lines = _sampling_lines(capsys.readouterr().err)
    assert lines and re.match(r"Sampling: \d+/60 draws, \d+ divergences", lines[-1]), lines


def test_log_lines_write_the_finished_state_once():
    out = io.StringIO()
    lines = P.LogLines("Sampling", 10, every=1e9, stream=out)
    for done in (1, 10, 10, 10):  # a sampler's callback may repeat the final state
        lines.update(done, "0 divergences")
    lines.finish()
    assert [line.split(",")[0] for line in out.getvalue().splitlines()] == ["Sampling: 1/10 draws",
                                                                            "Sampling: 10/10 draws"]
