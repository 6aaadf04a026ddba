"""ReadBlock / ReadBlocks answers parsed without copying their data: the zero-copy reads'.

gRPC Python hands a response deserializer the message as one bytes object (its only copy of the
data that we cannot avoid). The generated protobuf classes would copy each `data` field into a
bytes of its own; these parsers return memoryviews into the message instead, which read_into
copies once into the caller's buffer. Only the fields the client uses are decoded; the others
(path, fallback, timing, crc32c) are skipped by wire type, so a field the server adds is skipped.
Field numbers: proto/blockread/v1/blockread.proto (ReadBlockResponse, ReadBlocksResponse,
ReadResult).
"""

from typing import List, Tuple


class Result:
    """One ReadResult: the attributes _ReadStream.results uses, with `data` a memoryview."""

    __slots__ = ("tag", "code", "error_message", "data")

    def __init__(self) -> None:
        self.tag = 0
        self.code = 0
        self.error_message = ""
        self.data: memoryview = memoryview(b"")


class Results:
    """A ReadBlocksResponse: `.results`, a list of Result."""

    __slots__ = ("results",)

    def __init__(self, results: List[Result]) -> None:
        self.results = results


def _varint(buf: memoryview, at: int) -> Tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _fields(buf: memoryview, start: int, end: int):  # yields (number, wire type, value, at)
    at = start
    while at < end:
        key, at = _varint(buf, at)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, at = _varint(buf, at)
            yield number, kind, value
        elif kind == 2:
            size, at = _varint(buf, at)
            yield number, kind, (at, at + size)
            at += size
        elif kind == 5:
            at += 4
        elif kind == 1:
            at += 8
        else:
            raise ValueError(f"unexpected protobuf wire type {kind}")


def parse_read_block(message: bytes) -> memoryview:
    """A ReadBlockResponse's `data` (field 1), as a memoryview into `message`."""
    buf = memoryview(message)
    for number, kind, value in _fields(buf, 0, len(buf)):
        if number == 1 and kind == 2:
            begin, end = value
            return buf[begin:end]
    return buf[0:0]


def parse_read_blocks(message: bytes) -> Results:
    """A ReadBlocksResponse: results (field 1) of ReadResult {1 tag, 2 code, 3 error_message,
    4 data}; data as memoryviews into `message`."""
    buf = memoryview(message)
    results = []
    for number, kind, value in _fields(buf, 0, len(buf)):
        if number != 1 or kind != 2:
            continue
        result = Result()
        for inner, inner_kind, inner_value in _fields(buf, value[0], value[1]):
            if inner == 1 and inner_kind == 0:
                result.tag = inner_value
            elif inner == 2 and inner_kind == 0:
                # int32: a negative code is sent as a 64-bit two's complement varint.
                result.code = inner_value - (1 << 64) if inner_value >= 1 << 63 else inner_value
            elif inner == 3 and inner_kind == 2:
                result.error_message = bytes(buf[inner_value[0]:inner_value[1]]).decode(
                    "utf-8", "replace")
            elif inner == 4 and inner_kind == 2:
                result.data = buf[inner_value[0]:inner_value[1]]
        results.append(result)
    return Results(results)
