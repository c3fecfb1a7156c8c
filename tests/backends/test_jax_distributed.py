"""FITC rows sharded across two JAX processes (issue 60, part 5): JAX's multi-controller
model on one host, two processes with one CPU device each and a local coordinator
(``jax.distributed.initialize``), the rows split by ``backends.jax.sharding`` over both
processes' devices. The evidence and its gradient equal the single-process values, and a
short numpyro NUTS run on the sharded evidence completes in both with the same draws.
"""

import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("jax", reason="the JAX backend needs jax: pip install pymc-gpc[jax]")
pytest.importorskip("numpyro", reason="the NUTS run needs numpyro: pip install pymc-gpc[jax]")

_WORKER = textwrap.dedent("""
    import json, sys
    import jax
    pid, port = int(sys.argv[1]), int(sys.argv[2])
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid)
    import numpy as np, jax.numpy as jnp
    from numpyro.infer import MCMC, NUTS
    from pymc_gpc import likelihoods as L
    from pymc_gpc.backends.jax import fitc, sharding
    assert jax.process_count() == 2 and jax.device_count() == 2 and len(jax.local_devices()) == 1
    rng = np.random.default_rng(4)
    n, m = 41, 6                                  # odd n: an uneven split over the two processes
    X = rng.normal(size=(n, 2)); Xu = X[:m] + 0.2
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)

    def se(theta, A, B):
        return jnp.exp(theta[0]) * jnp.exp(-0.5 * (((A[:, None] - B[None]) / jnp.exp(theta[1])) ** 2).sum(-1))

    def log_evidence(marginal):
        def f(theta):  # hyperparameters -> FITC EP log evidence (binary probit)
            Kuu = se(theta, Xu, Xu) + 1e-6 * jnp.eye(m)
            return marginal(Kuu, se(theta, Xu, X), jnp.full(n, jnp.exp(theta[0]) + 1e-6), jnp.zeros(0), y)[0]
        return f

    theta = jnp.array([0.3, -0.2])
    single = jax.jit(jax.value_and_grad(log_evidence(fitc.marginal_fn("ep", L.Probit.kind, tol=1e-12))))
    with jax.default_device(jax.local_devices()[0]):  # this process alone
        v1, g1 = single(theta)
    sharded = jax.jit(jax.value_and_grad(log_evidence(
        sharding.marginal_fn("ep", L.Probit.kind, devices=jax.devices(), tol=1e-12))))
    hlo = sharded.lower(theta).compile().as_text()
    v2, g2 = sharded(theta)
    evidence = log_evidence(sharding.marginal_fn("ep", L.Probit.kind, devices=jax.devices(), tol=1e-8))
    # trees of at most 2**3 - 1 leapfrog steps: every gradient is a round of collective sums
    # between the processes, and a draw takes up to 2**10 - 1 steps by default. Five warm-up
    # and five kept draws: each round makes the process that arrives first wait for the
    # other, and gloo's event loop polls while it waits (half of the processes' CPU was
    # system time, more with another job on the cores), so the cost is in the rounds
    mcmc = MCMC(NUTS(potential_fn=lambda t: -(evidence(t) - 0.5 * jnp.sum(t ** 2)), max_tree_depth=3),
                num_warmup=5, num_samples=5, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), init_params=jnp.zeros(2))
    draws = np.asarray(mcmc.get_samples())
    print(json.dumps({"single": [float(v1), *np.asarray(g1).tolist()],
                      "sharded": [float(v2), *np.asarray(g2).tolist()],
                      "all_reduce": "all-reduce" in hlo, "draws": draws.tolist()}), flush=True)
    jax.distributed.shutdown()
""")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_share_the_rows_and_agree_with_one():
    port = _free_port()
    # JAX's persistent compilation cache off: where the shared cache (tests/conftest.py) already
    # held this test's programs, from an earlier run, the two processes hung until the timeout
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "", "OMP_NUM_THREADS": "1",
           "JAX_ENABLE_COMPILATION_CACHE": "false",
           "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, str(i), str(port)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(2)]
    try:
        outs = [p.communicate(timeout=900) for p in procs]
    finally:
        for p in procs:
            p.kill()
    results = []
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    for r in results:
        assert r["all_reduce"], "no collective sum in the compiled program: the rows were not split"
        np.testing.assert_allclose(r["sharded"], r["single"], rtol=1e-10, atol=1e-10)
        assert np.all(np.isfinite(r["draws"])) and np.shape(r["draws"]) == (5, 2)
    # the two controllers ran one program: the same evidence and the same NUTS draws
    np.testing.assert_array_equal(results[0]["single"], results[1]["single"])
    np.testing.assert_array_equal(results[0]["draws"], results[1]["draws"])
