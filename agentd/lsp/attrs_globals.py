"""Smaller globals for the methods attrs generated for lsprotocol's classes
(issue 20: RSS after the warm-up).

attrs compiles each class's generated methods (`__init__`, `__repr__`,
`__eq__`, ...) in one script whose globals start as a copy of the class's
whole module namespace, so that `typing.get_type_hints(Cls.__init__)` can
resolve string annotations. `lsprotocol.types` defines about 550 classes in
a module of about 700 names, and each class keeps its own copy: about 5 MB,
resident from pygls' first import, for hints nothing in the daemon asks for
(cattrs reads a class's own hints, which use the module itself).

`slim(module)` rebinds each such method to a new function over the same code
whose globals hold only the names that code loads; the copies are then
freed. The rebinding is one class-attribute assignment per method (atomic
under the GIL), so it is safe in the warm-up thread while the loop thread
builds and reads those classes: a call already running keeps its old
globals. What changes: `get_type_hints` on one of those methods no longer
resolves string annotations that name the module's classes.
"""

from __future__ import annotations

import sys
import types

_GENERATED = "<attrs generated"
# What attrs generates in a class's script (attrs 23-26).
_METHODS = (
    "__init__",
    "__attrs_init__",
    "__repr__",
    "__eq__",
    "__ne__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__hash__",
)


def _names(code: types.CodeType, into: set[str]) -> None:
    into.update(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _names(const, into)


def slim(module_name: str = "lsprotocol.types") -> int:
    """Rebind the generated methods of `module_name`'s attrs classes to
    minimal globals; how many methods were rebound (0 if not imported)."""
    module = sys.modules.get(module_name)
    if module is None:
        return 0
    namespace = vars(module)
    rebound = 0
    for cls in list(namespace.values()):
        if not isinstance(cls, type):
            continue
        attrs = cls.__dict__
        init = attrs.get("__init__")
        if not (
            isinstance(init, types.FunctionType)
            and init.__code__.co_filename.startswith(_GENERATED)
            and init.__globals__ is not namespace
        ):
            continue
        # One generated script, one globals dict, for all of a class's methods;
        # one left out would keep the dict alive (and still work).
        old = init.__globals__
        methods = [
            (name, func)
            for name in _METHODS
            if isinstance(func := attrs.get(name), types.FunctionType) and func.__globals__ is old
        ]
        wanted = {"__builtins__"}
        for _, func in methods:
            _names(func.__code__, wanted)
        if len(wanted) >= len(old):
            continue  # already minimal
        new = {key: old[key] for key in wanted if key in old}
        for name, func in methods:
            setattr(cls, name, _rebind(func, new))
            rebound += 1
    return rebound


def _rebind(func: types.FunctionType, globals_: dict[str, object]) -> types.FunctionType:
    copy = types.FunctionType(
        func.__code__, globals_, func.__name__, func.__defaults__, func.__closure__
    )
    copy.__kwdefaults__ = func.__kwdefaults__
    copy.__annotations__ = func.__annotations__
    copy.__qualname__ = func.__qualname__
    copy.__module__ = func.__module__
    copy.__doc__ = func.__doc__
    copy.__dict__.update(func.__dict__)
    return copy
