"""A binary stream that makes its bytes on demand (inflating, transcoding): the plumbing
``io`` needs, written once. Subclasses give ``_read(n)``, at most ``n`` bytes, ``b""`` at the end."""
from __future__ import annotations

import io


class PullReader(io.RawIOBase):
    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        if n is not None and n >= 0:
            return self._read(n)
        parts = []
        while True:
            part = self._read(1 << 20)
            if not part:
                return b"".join(parts)
            parts.append(part)

    def _read(self, n: int) -> bytes:
        raise NotImplementedError


def first_line(exc: BaseException) -> str:
    """An exception as one line of at most 200 characters (its type's name when it has no text):
    how every read error is quoted in a one-line message."""
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200] if text.strip() else type(exc).__name__
