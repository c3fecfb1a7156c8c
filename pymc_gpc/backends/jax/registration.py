"""Register the Ops' JAX implementations (``backends/jax/dispatch.py``) once PyTensor's JAX backend is loaded.

``install()`` runs when ``pymc_gpc`` is imported. It imports nothing from jax: if
``pytensor.link.jax.dispatch`` is already imported, ``backends/jax/dispatch.py`` is imported at once;
otherwise an import hook imports it right after PyTensor's JAX dispatch is first imported
(``pm.sample(nuts_sampler="numpyro")``, ``pytensor.function(..., mode="JAX")``). Without
jax installed nothing happens, and PyTensor / PyMC raise their own ImportError; the
message of ``missing_jax_message`` says what to install.
"""

import importlib
import importlib.abc
import importlib.util
import sys

_TARGET = "pytensor.link.jax.dispatch"
# the modules whose import registers the Ops with jax_funcify: the binary (dense and FITC) Ops,
# then the multi-class ones (dense, then FITC: its Ops subclass the dense ones), then HSGP's,
# and the multi-class HSGP Ops, then the special functions the priors' graphs need (``ive``:
# the periodic HSGP prior)
_MODULES = ("pymc_gpc.backends.jax.dispatch", "pymc_gpc.backends.jax.multiclass",
            "pymc_gpc.backends.jax.multiclass_fitc", "pymc_gpc.backends.jax.hsgp",
            "pymc_gpc.backends.jax.multiclass_hsgp", "pymc_gpc.backends.jax.special")

JAX_SAMPLERS = ("numpyro", "blackjax")


def missing_jax_message(what):
    return (f"{what} needs JAX: install the optional extra with `pip install pymc-gpc[jax]` "
            "(jax, numpyro and blackjax)")


def jax_available():
    """Whether jax can be imported (without importing it)."""
    return importlib.util.find_spec("jax") is not None


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Imports the registering modules (``_MODULES``) right after ``pytensor.link.jax.dispatch`` has executed."""

    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # once; and let the ordinary finders find the module
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader_exec = spec.loader.exec_module

        def exec_module(module):
            loader_exec(module)
            _register()

        spec.loader.exec_module = exec_module
        return spec


def _half_made():
    """Whether one of ``_MODULES`` is being imported right now (its body has not finished)."""
    return any(getattr(getattr(sys.modules.get(m), "__spec__", None), "_initializing", False) for m in _MODULES)


def _register():
    """Import ``_MODULES``. Where a user's direct import of one of them is what loaded PyTensor's
    JAX dispatch, that module is half made here and a module importing from it fails: it is
    left for ``dispatch.jax_funcify_structured``, which registers again on first use."""
    for module in _MODULES:
        try:
            importlib.import_module(module)
        except ImportError:
            if not _half_made():
                raise


def install():
    """Register now if PyTensor's JAX dispatch is loaded, else when it is (see module docstring)."""
    if _TARGET in sys.modules:
        _register()
    elif jax_available() and not any(isinstance(f, _RegisterAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())
