"""fsspec URLs (``s3://``, ``gs://``, ``memory://``, ``file://`` ...) wherever a path is taken.

fsspec is optional (``pip install 'oomdoctor[cloud]'``, plus the backend: s3fs, gcsfs ...);
without it a URL is a one-line error. ``file://`` URLs need no fsspec: they are the local
path they name, read (and written) as any other path.
"""
from __future__ import annotations

import os
from typing import BinaryIO, Optional

from .pull import first_line

FSSPEC_MISSING = "URLs need the 'fsspec' package (pip install 'oomdoctor[cloud]')"


class UrlError(Exception):
    """A URL that cannot be opened; the message is one line for the user."""


def is_url(path: str) -> bool:
    """``scheme://...`` with a scheme of letters, digits, '+' and '-' (two characters at least,
    so that ``C://`` on Windows stays a path)."""
    head, sep, _ = path.partition("://")
    return bool(sep) and head.replace("+", "").replace("-", "").isalnum() and len(head) > 1


def local_path(url: str) -> Optional[str]:
    """The local path a ``file://`` (or ``local://``) URL names; None for any other URL."""
    head, sep, rest = url.partition("://")
    if not sep or head.lower() not in ("file", "local"):
        return None
    if rest.startswith("localhost/"):
        rest = rest[len("localhost"):]
    return rest or os.sep


def url_fs(url: str):
    """(file system, path in it) of a URL, or ``UrlError``."""
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise UrlError(FSSPEC_MISSING) from None
    try:
        return url_to_fs(url)
    except Exception as exc:  # noqa: BLE001 - s3:// without s3fs, an unknown protocol, a backend's own error
        raise UrlError(f"cannot open this URL ({first_line(exc)})") from None


def open_url(url: str) -> BinaryIO:
    """The bytes behind a URL, opened for reading; ``UrlError`` (one line, no URL in it)."""
    fs, path = url_fs(url)
    try:
        if fs.isdir(path):
            raise UrlError("is a directory (use 'oomdoctor scan' for directories)")
        return fs.open(path, "rb")
    except UrlError:
        raise
    except FileNotFoundError:
        raise UrlError("no such file") from None
    except PermissionError:
        raise UrlError("permission denied") from None
    except Exception as exc:  # noqa: BLE001 - any backend error is one line
        raise UrlError(f"cannot open ({first_line(exc)})") from None
