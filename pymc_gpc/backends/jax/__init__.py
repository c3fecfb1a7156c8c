"""The JAX backend: the JAX engine (``engine``: EP and Laplace as pure jnp functions; the
FITC and HSGP priors in ``fitc`` and ``hsgp``, several classes in ``multiclass`` and
``multiclass_fitc``), the likelihoods' jnp site updates (``likelihoods``), the Ops' ``jax_funcify``
(``dispatch``) and its lazy registration (``registration``). Importing this package
imports nothing from jax; ``registration.install()`` defers ``dispatch`` until PyTensor's
JAX dispatch is imported."""
