"""Events -> the IDE's JSON on the hot path, without ``json_format.MessageToDict``.

Every streamed token passes here, and protobuf's generic JSON printer costs tens of
microseconds a call. A flat payload (strings, bools, 32-bit ints and enums, which is
what tokens, ``done`` and most events are) is read field by field along a plan made
once per message type; anything else (nested or repeated fields) goes through
``render.proto_json``. The output is the same either way, by the same rules: proto
field names, unset ``optional`` fields left out, ``<x>_json`` decoded as ``<x>``, enums
by name (a test compares both on every event type).
"""

from __future__ import annotations

from typing import Any

import orjson
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from codelab.v1 import common_pb2 as pb
from services.gateway.render import JSON_SUFFIX, decode_json, proto_json

_PLAIN, _JSON, _ENUM = 0, 1, 2
_FLAT_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_STRING,
        FieldDescriptor.TYPE_BOOL,
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_ENUM,
    }
)
Plan = tuple[tuple[str, str, bool, int, dict[int, str]], ...]
_PLANS: dict[str, Plan | None] = {}


def _plan(descriptor: Any) -> Plan | None:
    """(field, key, has presence, kind, enum names) per field; None when not flat."""
    fields = []
    for field in descriptor.fields:
        if field.type not in _FLAT_TYPES or field.is_repeated:
            return None
        kind, names, key = _PLAIN, {}, field.name
        if field.type == FieldDescriptor.TYPE_ENUM:
            kind = _ENUM
            names = {v.number: v.name for v in field.enum_type.values}  # enum fields have one
        elif field.name.endswith(JSON_SUFFIX) and field.type == FieldDescriptor.TYPE_STRING:
            kind, key = _JSON, field.name[: -len(JSON_SUFFIX)]
        fields.append((field.name, key, field.has_presence, kind, names))
    return tuple(fields)


def payload_json(message: Message) -> dict[str, Any]:
    """One event payload as the IDE sees it (see the module docstring for the rules)."""
    descriptor = message.DESCRIPTOR
    name = descriptor.full_name
    if name not in _PLANS:
        _PLANS[name] = _plan(descriptor)
    plan = _PLANS[name]
    if plan is None:
        return proto_json(message)
    out: dict[str, Any] = {}
    for field, key, presence, kind, names in plan:
        if presence and not message.HasField(field):
            continue
        value = getattr(message, field)
        if kind == _JSON:
            value = decode_json(value)
        elif kind == _ENUM:
            value = names.get(value, value)
        out[key] = value
    return out


def event_json(event: pb.ServerEvent) -> dict[str, Any]:
    """A ServerEvent as the IDE sees it: ``{"type", **payload, "session_id", "seq",
    "timestamp"}``."""
    kind = event.WhichOneof("event")
    if kind is None:
        raise ValueError("event without a type")
    out: dict[str, Any] = {"type": kind}
    out.update(payload_json(getattr(event, kind)))
    out["session_id"] = event.session_id
    out["seq"] = event.seq
    out["timestamp"] = event.timestamp
    return out


def dumps(payload: dict[str, Any]) -> str:
    """Compact JSON text (UTF-8 as is, like ``ensure_ascii=False``)."""
    return orjson.dumps(payload).decode()
