# The storage contract's error: every engine raises StorageError (an OSError, so the
# coordinators' `except OSError` paths keep working) with the errno that caused it, after
# undoing whatever part of the operation had happened. Callers map it to KAFKA_STORAGE_ERROR.
from __future__ import annotations

import errno
import os


class StorageError(OSError):
    """A storage operation failed and left no partial effect (or marked the file failed)."""

    def __init__(self, code: int, what: str) -> None:
        super().__init__(code, f"{what}: {os.strerror(code)}")
        self.what = what

    @property
    def kind(self) -> str:
        """The errno's symbolic name: ENOSPC, EIO, EMFILE..."""
        return errno.errorcode.get(self.errno or 0, str(self.errno))

    @property
    def recoverable(self) -> bool:
        """Out of space or handles: the next attempt may succeed once some are freed."""
        return self.errno in (errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE)


def as_storage_error(exc: OSError, what: str) -> StorageError:
    if isinstance(exc, StorageError):
        return exc
    return StorageError(exc.errno if exc.errno is not None else errno.EIO, what)


class OfflineError(StorageError):
    """The log directory went offline after a failed fsync; nothing is written until restart."""

    def __init__(self, cause: str) -> None:
        super().__init__(errno.EIO, f"log directory offline since {cause}")
