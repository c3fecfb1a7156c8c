"""The Ops' implementations per PyTensor backend, as PyTensor's ``link/<backend>/dispatch``:
``numba`` (the default: object-mode ``perform`` and binary EP's compiled path) and ``jax``
(PyMC's JAX samplers). PyTensor's Python VM runs the Ops' own ``perform`` (``python_vm``).
Importing this package imports neither numba's nor JAX's dispatch."""
