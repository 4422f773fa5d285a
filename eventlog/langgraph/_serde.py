"""LangGraph's values read without importing or calling what the bytes name (docs/durability.md,
guarantee 7): `SafeSerializer`, the one decoder every read path of the package uses.

LangGraph's `JsonPlusSerializer()` rebuilds an object from a msgpack extension that names its
module, its attribute and the arguments to call it with; by default it imports and calls any
of them (`("os", "system", "touch X")` runs a command). `SafeSerializer` writes as LangGraph
does and reads only:

- the types LangGraph allows in its strict mode (`SAFE_MSGPACK_TYPES`: LangChain's messages
  and `Document`, `Send`, `Command`, `Interrupt`, datetimes, `UUID`, `Decimal`, paths, sets...)
  and the method calls it allows (`datetime.fromisoformat`);
- the types passed as `allowed_modules` (the explicit opt-in for a wider list), or added by
  LangGraph's own `with_allowlist`;
- LangGraph's older "json" values: LangChain's messages (`lc: 1`) and the types above (`lc: 2`).

Any other type is never imported: the saver gets its stored fields as plain data (as LangGraph's
strict mode returns them), the command line and the UI see `{"unknown_type": "module.name",
"data": fields}`. A "pickle" value, a value of an unknown encoding, and a value nested deeper
than `value_depth_max` are refused with `RefusedValueError`.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable
from typing import Any

import ormsgpack
from langchain_core.load.load import Reviver
from langgraph.checkpoint.serde._msgpack import SAFE_MSGPACK_METHODS, SAFE_MSGPACK_TYPES
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import (
    EXT_CONSTRUCTOR_KW_ARGS,
    EXT_CONSTRUCTOR_POS_ARGS,
    EXT_CONSTRUCTOR_SINGLE_ARG,
    EXT_DELTA_SNAPSHOT,
    EXT_METHOD_SINGLE_ARG,
    EXT_NUMPY_ARRAY,
    EXT_PYDANTIC_V1,
    EXT_PYDANTIC_V2,
    JsonPlusSerializer,
)
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from ..errors import EventLogError

__all__ = ["RefusedValueError", "SafeSerializer", "copying_reader", "value_depth_max"]

value_depth_max = 64
"""Deepest nesting of msgpack extensions (an object inside an object) or of JSON in one value."""

_MESSAGES = Reviver(allowed_objects="messages")
"""LangChain's reviver limited to its chat messages (LangChain calls that list safe for untrusted input)."""

_CONSTRUCTORS = frozenset(
    {
        EXT_CONSTRUCTOR_SINGLE_ARG,
        EXT_CONSTRUCTOR_POS_ARGS,
        EXT_CONSTRUCTOR_KW_ARGS,
        EXT_METHOD_SINGLE_ARG,
        EXT_PYDANTIC_V1,
        EXT_PYDANTIC_V2,
    }
)


class RefusedValueError(EventLogError, ValueError):
    """A stored LangGraph value that is not decoded: a pickle, an encoding eventlog does not know,
    nesting deeper than `value_depth_max`, or bytes that are not what their type says."""


def _keys(modules: Iterable[tuple[str, ...] | type]) -> frozenset[tuple[str, ...]]:
    """`(module, name)` pairs from pairs or classes (the form of LangGraph's `allowed_msgpack_modules`)."""
    out: set[tuple[str, ...]] = set()
    for item in modules:
        if isinstance(item, type):
            out.add((item.__module__, item.__name__))
        elif isinstance(item, tuple) and len(item) == 2 and all(isinstance(x, str) for x in item):
            out.add(item)
        else:
            raise TypeError(f"allowed_modules takes classes or (module, name) pairs, not {item!r}")
    return frozenset(out)


class SafeSerializer(JsonPlusSerializer):
    """LangGraph's serializer for writing; for reading, a decoder that constructs only allowed types.

    `allowed_modules`: more classes, or `(module, name)` pairs, to construct on read, beyond the
    types LangGraph allows in its strict mode. `tag_unknown`: any other type is returned as
    `{"unknown_type": "module.name", "data": fields}` (for display) instead of its fields alone.
    """

    def __init__(self, allowed_modules: Iterable[tuple[str, ...] | type] = (), *, tag_unknown: bool = False) -> None:
        self.allowed = SAFE_MSGPACK_TYPES | _keys(allowed_modules)
        """The `(module, name)` pairs constructed on read."""
        self.tag_unknown = tag_unknown
        super().__init__(
            pickle_fallback=False,
            allowed_json_modules=None,
            allowed_msgpack_modules=tuple(self.allowed),
            __unpack_ext_hook__=_Unpacker(self).ext,
        )

    def with_msgpack_allowlist(self, extra_allowlist: Iterable[tuple[str, ...] | type]) -> SafeSerializer:
        """A serializer that constructs the types in `extra_allowlist` too (LangGraph's `with_allowlist`)."""
        extra = _keys(extra_allowlist)
        if extra <= self.allowed:
            return self
        return SafeSerializer(self.allowed | extra, tag_unknown=self.tag_unknown)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        kind, raw = data
        if kind == "null":
            return None
        if kind == "bytes":
            return bytes(raw)
        if kind == "bytearray":
            return bytearray(raw)
        unpacker = _Unpacker(self)
        try:
            if kind == "msgpack":
                return unpacker.unpack(raw)
            if kind == "json":
                return json.loads(raw, object_hook=unpacker.revive)
        except RefusedValueError:
            raise
        except (ValueError, TypeError, RecursionError) as exc:
            raise RefusedValueError(unpacker.refused or f"a {kind!r} value that does not decode ({exc})") from None
        if kind == "pickle":
            raise RefusedValueError("a 'pickle' value: eventlog never unpickles (docs/durability.md, guarantee 7)")
        raise RefusedValueError(f"a value of type {kind[:64]!r}, which eventlog does not decode")

    def unknown(self, module: str, name: str, data: Any, ext: tuple[int, bytes] | None = None) -> Any:
        """What a type that is not allowed reads as: its data, never the object. `ext` is the msgpack
        extension it was read from (its code and bytes), None for a "json" value."""
        if self.tag_unknown:
            return {"unknown_type": f"{module}.{name}", "data": data}
        return data


class _BytesKeeping(SafeSerializer):
    """`SafeSerializer` whose types that are not allowed read as the msgpack extension they were
    stored as (`ormsgpack.Ext`: its code and bytes), which any msgpack serializer writes back as
    it was: a copy keeps them exactly and builds none."""

    def unknown(self, module: str, name: str, data: Any, ext: tuple[int, bytes] | None = None) -> Any:
        if ext is None:
            raise RefusedValueError(
                f"a 'json' value of type {module}.{name}, which a copy does not construct "
                "(pass its class in allowed_modules to copy it)"
            )
        return ormsgpack.Ext(*ext)


def copying_reader(serde: SerializerProtocol, allowed_modules: Iterable[tuple[str, ...] | type] = ()) -> Any:
    """What reads a saver's values for a copy to another saver, in place of its `serde`: the types
    `SafeSerializer` allows (and `allowed_modules`) are built, any other msgpack value is kept as
    its bytes; inside the saver's `EncryptedSerializer` if it has one. TypeError for a serializer
    that is not LangGraph's (whose values this cannot read without running what it runs)."""
    reader = _BytesKeeping(allowed_modules)
    if isinstance(serde, JsonPlusSerializer):
        return reader
    if isinstance(serde, EncryptedSerializer) and isinstance(serde.serde, JsonPlusSerializer):
        return EncryptedSerializer(serde.cipher, reader)
    raise TypeError(
        f"serializer is a {type(serde).__name__}: a copy reads only through "
        "LangGraph's JsonPlusSerializer (or one inside EncryptedSerializer), so that nothing read runs code"
    )


class _Unpacker:
    """One read's msgpack extension hook: how deep it is, and why it refused (ormsgpack does not
    pass a hook's own error through)."""

    def __init__(self, serde: SafeSerializer) -> None:
        self.serde = serde
        self.depth = 0
        self.refused: str | None = None

    def unpack(self, raw: bytes) -> Any:
        return ormsgpack.unpackb(raw, ext_hook=self.ext, option=ormsgpack.OPT_NON_STR_KEYS)

    def ext(self, code: int, raw: bytes) -> Any:
        if self.depth >= value_depth_max:
            self.refused = f"a value nested more than {value_depth_max} objects deep"
            raise RefusedValueError(self.refused)
        self.depth += 1
        try:
            return self._ext(code, raw)
        finally:
            self.depth -= 1

    def _ext(self, code: int, raw: bytes) -> Any:
        if code == EXT_DELTA_SNAPSHOT:
            return _DeltaSnapshot(self.unpack(raw))
        if code == EXT_NUMPY_ARRAY:
            parts = self.unpack(raw)
            try:
                return _array(parts)
            except Exception:  # noqa: BLE001 - no numpy, or not an array: data
                return self.serde.unknown("numpy", "ndarray", parts, (code, raw))
        if code not in _CONSTRUCTORS:
            return self.serde.unknown("msgpack", f"ext{code}", raw, (code, raw))
        tup = self.unpack(raw)
        if not (isinstance(tup, list) and len(tup) >= 3 and isinstance(tup[0], str) and isinstance(tup[1], str)):
            return self.serde.unknown("msgpack", f"ext{code}", tup, (code, raw))
        module, name, arg = tup[0], tup[1], tup[2]
        if code == EXT_METHOD_SINGLE_ARG:
            allowed = len(tup) > 3 and (module, name, tup[3]) in SAFE_MSGPACK_METHODS
        else:
            allowed = (module, name) in self.serde.allowed
        if not allowed:
            return self.serde.unknown(module, name, arg, (code, raw))
        try:
            return _construct(code, _target(module, name), arg, tup)
        except Exception:  # noqa: BLE001 - an allowed type that rejects its stored fields reads as data, like LangGraph
            return self.serde.unknown(module, name, arg, (code, raw))

    def revive(self, value: dict[str, Any]) -> Any:
        """`json.loads`'s object hook: LangChain's messages (`lc: 1`) and allowed types (`lc: 2`)."""
        ident = value.get("id")
        if value.get("type") != "constructor" or not isinstance(ident, list) or len(ident) < 2:
            return value
        path = [str(x) for x in ident]
        module, name = ".".join(path[:-1]), path[-1]
        kwargs = value.get("kwargs")
        args = value.get("args")
        if value.get("lc") == 1:
            try:
                return _MESSAGES(value)
            except Exception:  # noqa: BLE001 - not one of LangChain's messages: data
                return self.serde.unknown(module, name, kwargs)
        if value.get("lc") != 2 or (module, name) not in self.serde.allowed:
            return self.serde.unknown(module, name, kwargs if kwargs is not None else args)
        try:
            target = _target(module, name)
            if isinstance(kwargs, dict):
                return target(*(args if isinstance(args, list) else ()), **kwargs)
            return target(*(args if isinstance(args, list) else ()))
        except Exception:  # noqa: BLE001 - an allowed type that rejects its stored fields reads as data
            return self.serde.unknown(module, name, kwargs if kwargs is not None else args)


_targets: dict[tuple[str, str], Any] = {}
"""Allowed types already looked up: `(module, name)` to the class (only ever an allowed one)."""


def _target(module: str, name: str) -> Any:
    """The attribute `name` of `module`; called only for a pair on an allow-list."""
    found = _targets.get((module, name))
    if found is None:
        found = _targets[(module, name)] = getattr(importlib.import_module(module), name)
    return found


def _construct(code: int, target: Any, arg: Any, tup: list[Any]) -> Any:
    """An allowed type built from its extension's stored arguments, as LangGraph builds it."""
    if code == EXT_CONSTRUCTOR_SINGLE_ARG:
        return target(arg)
    if code == EXT_CONSTRUCTOR_POS_ARGS:
        if (tup[0], tup[1]) == ("langgraph.types", "Send") and len(arg) == 3:
            return target(arg[0], arg[1], timeout=arg[2])
        return target(*arg)
    if code == EXT_CONSTRUCTOR_KW_ARGS:
        return target(**arg)
    if code == EXT_METHOD_SINGLE_ARG:
        return getattr(target, tup[3])(arg)
    try:
        return target(**arg)
    except Exception:  # noqa: BLE001 - LangGraph builds a pydantic model without validation then
        return target.model_construct(**arg) if code == EXT_PYDANTIC_V2 else target.construct(**arg)


def _array(parts: Any) -> Any:
    """A numpy array from its dtype, shape, order and bytes (never an array of objects)."""
    import numpy as np

    dtype, shape, order, buf = parts
    return np.frombuffer(buf, dtype=np.dtype(dtype)).reshape(shape, order=order)
