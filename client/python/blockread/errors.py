"""The exceptions blockread raises: one class per status code a caller may handle differently.

Every error is a `blockread.Error` (not a `grpc.RpcError`: callers need not import grpc) with
`.code`, the `grpc.StatusCode`, and `.message`, the server's text (or gRPC's, for transport
failures). `Client.read_many` also sets `.index`, the position in its list of the read that
failed; it is None for an error of the stream as a whole.

Each class that has a builtin meaning also subclasses that builtin, so code written for files
catches it: NotFound is a FileNotFoundError, PermissionDenied and Unauthenticated are
PermissionErrors, InvalidArgument a ValueError, OutOfRange an EOFError, Unavailable a
ConnectionError, DeadlineExceeded a TimeoutError.
"""

from typing import Any, Dict, Optional, Tuple, Type, Union

import grpc


class Error(Exception):
    """A failed blockread call. `.code`: a grpc.StatusCode; `.message`: what was wrong."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None,
                 index: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.index = index

    def __str__(self) -> str:
        where = f" (read_many item {self.index})" if self.index is not None else ""
        return f"{self.code.name}: {self.message}{where}"

    def __reduce__(self) -> Tuple[Any, ...]:
        # Picklable with its code and index, so it crosses a DataLoader worker boundary intact.
        return (_rebuild, (type(self), self.message, self.code, self.index))


def _rebuild(cls: Type["Error"], message: str, code: grpc.StatusCode,
             index: Optional[int]) -> "Error":
    return cls(message, code=code, index=index)


class NotFound(Error, FileNotFoundError):
    """No such file (or an imported file removed since import)."""
    code = grpc.StatusCode.NOT_FOUND


class OutOfRange(Error, EOFError):
    """The offset is beyond the end of the file."""
    code = grpc.StatusCode.OUT_OF_RANGE


class InvalidArgument(Error, ValueError):
    """Zero length, a length over the server's max_read_bytes, an overflowing range."""
    code = grpc.StatusCode.INVALID_ARGUMENT


class PermissionDenied(Error, PermissionError):
    """The caller's identity may not read this file."""
    code = grpc.StatusCode.PERMISSION_DENIED


class Unauthenticated(Error, PermissionError):
    """No valid credentials (token or client certificate)."""
    code = grpc.StatusCode.UNAUTHENTICATED


class Unavailable(Error, ConnectionError):
    """The server cannot be reached, or is shutting down."""
    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(Error):
    """The device failed the read (I/O error or short read). Not worth retrying."""
    code = grpc.StatusCode.DATA_LOSS


class ResourceExhausted(Error):
    """The server is overloaded (its queue of waiting reads is full); retry with backoff."""
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class DeadlineExceeded(Error, TimeoutError):
    """The call's timeout passed before the server answered."""
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class FailedPrecondition(Error):
    """An imported file changed in a way the server cannot follow; the message says why."""
    code = grpc.StatusCode.FAILED_PRECONDITION


_BY_CODE: Dict[grpc.StatusCode, Type[Error]] = {
    cls.code: cls for cls in (NotFound, OutOfRange, InvalidArgument, PermissionDenied,
                              Unauthenticated, Unavailable, DataLoss, ResourceExhausted,
                              DeadlineExceeded, FailedPrecondition)}
# google.rpc.Code numbers (ReadResult.code) -> grpc.StatusCode.
_BY_NUMBER: Dict[int, grpc.StatusCode] = {code.value[0]: code for code in grpc.StatusCode}


def from_code(code: Union[grpc.StatusCode, int], message: str,
              index: Optional[int] = None) -> Error:
    """The exception for `code` (a grpc.StatusCode or its number); plain Error for the others."""
    if not isinstance(code, grpc.StatusCode):
        code = _BY_NUMBER.get(code, grpc.StatusCode.UNKNOWN)
    return _BY_CODE.get(code, Error)(message, code=code, index=index)


def from_rpc_error(error: Any, index: Optional[int] = None) -> Error:
    """A grpc.RpcError (which is also a grpc.Call) as a blockread.Error."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    return from_code(code, details or code.name, index=index)
