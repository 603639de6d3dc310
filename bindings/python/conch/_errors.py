"""The exceptions of conch: one hierarchy keyed by the Connect code."""

from __future__ import annotations

__all__ = [
    "Error", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded",
    "NotFound", "AlreadyExists", "PermissionDenied", "ResourceExhausted",
    "FailedPrecondition", "Aborted", "OutOfRange", "Unimplemented",
    "Internal", "Unavailable", "DataLoss", "Unauthenticated",
    "CapabilityNotSupported", "ERRORS",
]


class Error(Exception):
    """An RPC failed, or the sandbox could not be reached.

    ``code`` is the Connect code's name ("unavailable"), ``code_value`` its
    number (gRPC's), ``message`` the text (the server's, or ours), and
    ``details`` the error details as ``(type_url, bytes)`` pairs.  When the
    failure cut a process short, ``result`` holds what was known of it (an
    ``ExecResult``: the output that arrived, the end if it came), else None.
    ``http_status`` is the HTTP status of the response (0: none was seen).
    """

    code = "unknown"
    code_value = 2

    def __init__(self, message, details=(), result=None, http_status=0):
        super().__init__(message)
        self.message = message
        self.details = list(details or ())
        self.result = result
        self.http_status = http_status

    def __str__(self):
        return f"{self.code}: {self.message}"

    @property
    def retryable(self) -> bool:
        """True for the codes a retry may cure (unavailable, resource
        exhausted, aborted)."""
        return self.code in ("unavailable", "resource_exhausted", "aborted")


def _make(name, code, value, doc):
    return type(name, (Error,), {"code": code, "code_value": value,
                                 "__doc__": doc, "__module__": "conch"})


Canceled = _make("Canceled", "canceled", 1, "The call was canceled.")
Unknown = _make("Unknown", "unknown", 2, "An unknown error.")
InvalidArgument = _make("InvalidArgument", "invalid_argument", 3,
                        "The request was invalid (e.g. a missing cwd).")
DeadlineExceeded = _make("DeadlineExceeded", "deadline_exceeded", 4,
                         "The deadline passed: e.g. the process outlived its "
                         "timeout and was killed.")
NotFound = _make("NotFound", "not_found", 5, "No such process.")
AlreadyExists = _make("AlreadyExists", "already_exists", 6, "Already exists.")
PermissionDenied = _make("PermissionDenied", "permission_denied", 7,
                         "Not allowed (e.g. another user).")
ResourceExhausted = _make("ResourceExhausted", "resource_exhausted", 8,
                          "A limit was reached.")
FailedPrecondition = _make("FailedPrecondition", "failed_precondition", 9,
                           "The system is not in a state for it (e.g. a "
                           "runtime directory that is not private).")
Aborted = _make("Aborted", "aborted", 10, "Aborted.")
OutOfRange = _make("OutOfRange", "out_of_range", 11, "Out of range.")
Unimplemented = _make("Unimplemented", "unimplemented", 12,
                      "The server does not implement it.")
Internal = _make("Internal", "internal", 13, "An internal error.")
Unavailable = _make("Unavailable", "unavailable", 14,
                    "The sandbox cannot be reached, or stopped answering (a "
                    "dead or frozen server ends open streams with this "
                    "within the keepalive bound).")
DataLoss = _make("DataLoss", "data_loss", 15, "Data loss.")
Unauthenticated = _make("Unauthenticated", "unauthenticated", 16,
                        "Bad or missing credentials (access token, user).")


class CapabilityNotSupported(Unimplemented):
    """The sandbox lacks a capability the call needs (streaming, stdin
    streams, PTYs); raised before anything is sent."""


ERRORS = {cls.code: cls for cls in (
    Canceled, Unknown, InvalidArgument, DeadlineExceeded, NotFound,
    AlreadyExists, PermissionDenied, ResourceExhausted, FailedPrecondition,
    Aborted, OutOfRange, Unimplemented, Internal, Unavailable, DataLoss,
    Unauthenticated)}
