"""numba's on-disk cache, invalidated whenever any module of the package changes.

numba checks only the source file of a cached function, but a compiled function
contains the machine code of the functions it calls (``ep._parallel_compiled`` holds
that of ``posterior``, ``likelihoods``, ``special`` and ``lapack``): an edit or an
upgrade of one module must invalidate the caches of the others. For functions defined
in this package, the source stamp numba compares is that of all the package's modules.
(PyTensor does the same for its generated code: ``NumbaPyTensorCacheLocator``.)
The stamp is a hash of the modules' contents, and ``STAMP`` is also part of the keys
under which PyTensor caches graphs containing the package's Ops (their compiled
implementations call package functions whose code PyTensor cannot see).
"""

import hashlib
import os

from numba.core import caching

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def _package_stamp():
    """A hash of the contents of every module of the package."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(_PACKAGE):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                digest.update(os.path.relpath(path, _PACKAGE).encode())
                with open(path, "rb") as f:
                    digest.update(f.read())
    return digest.hexdigest()


STAMP = _package_stamp()


def extend_stamp(part):
    """Add ``part`` to ``STAMP``: code from outside the package that the compiled functions
    contain (a likelihood defined elsewhere, ``likelihoods.base.register``)."""
    global STAMP
    STAMP = hashlib.sha256(f"{STAMP}|{part}".encode()).hexdigest()


def cache_key(*parts):
    """A key for PyTensor's cache of a compiled graph holding a package Op: a fixed-length
    hash of ``parts`` (reprs that are the same in every process) and of ``STAMP``. PyTensor
    puts it in file names, hence hashed."""
    return "pymc_gpc_" + hashlib.sha256(repr((STAMP, parts)).encode()).hexdigest()


def _package_locator(base):
    """``base`` (a numba cache locator), restricted to this package, with the package stamp."""

    class Locator(base):
        pymc_gpc = True

        @classmethod
        def from_function(cls, py_func, py_file):
            if not os.path.abspath(py_file).startswith(_PACKAGE + os.sep):
                return None
            return super().from_function(py_func, py_file)

        def get_source_stamp(self):
            return STAMP

    Locator.__name__ = Locator.__qualname__ = f"PackageStamped{base.__name__}"
    return Locator


def install():
    """Put the package-stamped locators first in numba's list (once)."""
    classes = caching.CacheImpl._locator_classes
    if not any(getattr(c, "pymc_gpc", False) for c in classes):
        bases = (caching.UserProvidedCacheLocator, caching.InTreeCacheLocator, caching.UserWideCacheLocator)
        classes[:0] = [_package_locator(b) for b in bases]
