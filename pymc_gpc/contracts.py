r"""Check an object against a contract: ``conformance_gaps(obj, contract)``.

The contracts live next to what they describe: ``likelihoods.base.BinaryLikelihood`` (and
the base classes ``likelihoods.Likelihood``, ``likelihoods.MulticlassLikelihood``),
``structures.base`` (``SolverPrior``, ``BinarySolverPrior``, ``LatentPosterior``,
``DenseLatentPosterior``, ``FITCLatentPosterior``, ``MulticlassPosterior``),
``structures.base.PriorStructure`` and ``approximations.base.SolveResult``. A contract is a
``typing.Protocol`` (its declared members) or a base class (its public members, which a
subclass must keep callable as the base declares them). ``isinstance(obj, protocol)`` checks
only that the members exist (``typing.runtime_checkable``); ``conformance_gaps`` also checks
the signatures.
"""

import inspect
from typing import Protocol

__all__ = ["conformance_gaps"]


def _members(contract):
    """{name: declared member} of a Protocol and the Protocols it extends, or of a base class
    and its bases (data members as None)."""
    protocol = getattr(contract, "_is_protocol", False)
    out = {}
    for klass in reversed(contract.__mro__):
        if klass is object or klass is Protocol or (protocol and not getattr(klass, "_is_protocol", False)):
            continue
        out.update({name: None for name in klass.__dict__.get("__annotations__", {})})
        out.update({name: v for name, v in klass.__dict__.items()
                    if not name.startswith("_") and (callable(v) or isinstance(v, property))})
    return out


def _accepts(declared, actual):
    """Why ``actual`` (a signature) cannot be called as ``declared`` is, or None: the declared
    required parameters by position, the declared optional ones by keyword, and no extra
    required parameter."""
    params = list(actual.parameters.values())
    var_pos = any(p.kind is p.VAR_POSITIONAL for p in params)
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    by_name = {p.name: p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    wanted = [p for p in declared.parameters.values() if p.name != "self"]
    required = [p for p in wanted if p.default is p.empty]
    if len(required) > len(positional) and not var_pos:
        return f"takes {len(positional)} positional arguments, the contract passes {len(required)}"
    keywords = [p.name for p in wanted if p.default is not p.empty]
    for want, got in zip(required, positional):
        if got.name in keywords:  # the keyword would then be passed twice
            return f"takes the contract's {want.name!r} as its {got.name!r}"
    for name in keywords:
        if name not in by_name and not var_kw:
            return f"does not accept the keyword {name!r}"
    extra = [p.name for p in positional[len(required):] if p.default is p.empty]
    extra += [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    if extra:
        return f"requires {extra}, which the contract does not pass"
    return None


_MISSING = object()


def conformance_gaps(obj, contract):
    """What ``obj`` (an instance) lacks to satisfy ``contract``: a list of messages, empty
    when it conforms. A method is compatible when it can be called as the contract declares
    it (``_accepts``); a data member or property must exist on the instance."""
    gaps = []
    for name, declared in _members(contract).items():
        # presence without evaluating: a property may rightly raise (a likelihood template's
        # ``params`` has no values), which hasattr would not tell from an absent member
        if inspect.getattr_static(obj, name, _MISSING) is _MISSING:
            gaps.append(f"{type(obj).__name__} has no {name!r}")
            continue
        if declared is None or isinstance(declared, property):
            continue
        actual = getattr(obj, name)
        if not callable(actual):
            gaps.append(f"{type(obj).__name__}.{name} is not callable")
            continue
        why = _accepts(inspect.signature(declared), inspect.signature(actual))
        if why:
            gaps.append(f"{type(obj).__name__}.{name} {why}")
    return gaps
