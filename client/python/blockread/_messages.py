"""stats() and explain() answers as frozen dataclasses, made from the protobuf messages.

One dataclass per message type, built from the message's descriptor (so a field the server adds
appears without a change here): a scalar field keeps its Python value, an enum becomes its name
("SIMPLE", "MAPPED"), a repeated field a tuple, a map a dict, a nested message its own
dataclass. The names are the proto's (proto/blockread/v1/blockread.proto): Stats.paths[0].reads,
Explanation.file.name.
"""

import dataclasses
from typing import Any, Dict, List, Tuple

from google.protobuf import descriptor as _descriptor
from google.protobuf.message import Message

from blockread._proto.blockread.v1 import blockread_pb2 as pb

_CLASSES: Dict[str, type] = {}
# Top-level answers get their API names; nested ones keep the proto's.
_NAMES = {"GetStatsResponse": "Stats", "ExplainResponse": "Explanation"}


def _class_for(desc: Any) -> type:
    cls = _CLASSES.get(desc.full_name)
    if cls is None:
        fields: List[Tuple[str, Any, Any]] = []
        for f in desc.fields:
            if _is_map(f):
                default: Any = dataclasses.field(default_factory=dict)
            elif f.label == _descriptor.FieldDescriptor.LABEL_REPEATED:
                default = dataclasses.field(default=())
            elif f.type == _descriptor.FieldDescriptor.TYPE_MESSAGE:
                default = dataclasses.field(default=None)
            elif f.type == _descriptor.FieldDescriptor.TYPE_ENUM:
                default = dataclasses.field(default=f.enum_type.values[0].name)
            else:
                default = dataclasses.field(default=f.default_value)
            fields.append((f.name, Any, default))
        cls = dataclasses.make_dataclass(_NAMES.get(desc.name, desc.name), fields, frozen=True,
                                         namespace={"__module__": __name__})
        cls.__doc__ = f"blockread.v1.{desc.name} as a frozen dataclass (see blockread.proto)."
        _CLASSES[desc.full_name] = cls
        globals()[cls.__name__] = cls  # picklable: found by module and name
    return cls


def _is_map(field: Any) -> bool:
    return (field.type == _descriptor.FieldDescriptor.TYPE_MESSAGE
            and field.message_type.GetOptions().map_entry)


def _value(field: Any, value: Any) -> Any:
    if field.type == _descriptor.FieldDescriptor.TYPE_MESSAGE:
        return to_dataclass(value)
    if field.type == _descriptor.FieldDescriptor.TYPE_ENUM:
        number = field.enum_type.values_by_number.get(value)
        return number.name if number is not None else value
    return value


def to_dataclass(message: Message) -> Any:
    """`message` as its frozen dataclass (recursively)."""
    desc = message.DESCRIPTOR
    values: Dict[str, Any] = {}
    for f in desc.fields:
        value = getattr(message, f.name)
        if _is_map(f):
            value_field = f.message_type.fields_by_name["value"]
            values[f.name] = {k: _value(value_field, v) for k, v in value.items()}
        elif f.label == _descriptor.FieldDescriptor.LABEL_REPEATED:
            values[f.name] = tuple(_value(f, v) for v in value)
        elif f.type == _descriptor.FieldDescriptor.TYPE_MESSAGE and not message.HasField(f.name):
            values[f.name] = None
        else:
            values[f.name] = _value(f, value)
    return _class_for(desc)(**values)


Stats = _class_for(pb.GetStatsResponse.DESCRIPTOR)
Explanation = _class_for(pb.ExplainResponse.DESCRIPTOR)
