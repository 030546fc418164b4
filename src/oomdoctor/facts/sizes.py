"""Byte sizes as logs print them, parsed to exact integers and formatted back.

Inside oomdoctor every size is an ``int`` of bytes; only renderers format them.
PyTorch's allocator prints binary units with two decimals (``20.00 MiB``), MPS before
torch 2.8 prints ``MB``/``GB`` but still means binary factors, XLA glues the unit to the
number (``1.52GiB``), DeepSpeed prints ``GB`` computed as ``bytes / 2**30``. So ``KB``,
``MB``, ``GB`` here are binary unless a caller says otherwise (``decimal=True``), which is
what the tools that print them actually mean.
"""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_BINARY = {
    "b": 1, "byte": 1, "bytes": 1,
    "k": 2**10, "kb": 2**10, "kib": 2**10,
    "m": 2**20, "mb": 2**20, "mib": 2**20,
    "g": 2**30, "gb": 2**30, "gib": 2**30,
    "t": 2**40, "tb": 2**40, "tib": 2**40,
    "p": 2**50, "pb": 2**50, "pib": 2**50,
    "e": 2**60, "eb": 2**60, "eib": 2**60,
}
_DECIMAL = {"kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15, "eb": 10**18}

# A number (thousands separators allowed) and a unit, optionally glued together; numpy prints
# three significant digits, so a trailing dot ("512. MiB") is a whole number.
SIZE_RE = re.compile(r"(?P<num>\d[\d,]*(?:\.\d*)?)\s*(?P<unit>[KMGTPE]i?B|bytes?|B)\b", re.I)


def to_bytes(number: str | float | int, unit: str, *, decimal: bool = False) -> int | None:
    """Exact bytes for ``number unit`` (``"3.39", "GiB"`` → 3640066703)."""
    key = unit.strip().lower()
    factor = (_DECIMAL.get(key) if decimal else None) or _BINARY.get(key)
    if factor is None:
        return None
    try:
        value = Decimal(str(number).replace(",", ""))
    except InvalidOperation:
        return None
    return int((value * factor).to_integral_value())


def parse_size(text: str | None, *, decimal: bool = False) -> int | None:
    """Parse one size such as ``'20.00 MiB'``, ``'0 bytes'``, ``'1.52GiB'`` to bytes."""
    if not text:
        return None
    m = SIZE_RE.search(text)
    if not m:
        return None
    return to_bytes(m.group("num"), m.group("unit"), decimal=decimal)


def format_size(n: int | None) -> str:
    """Human form with binary units, as PyTorch prints it (``3.39 GiB``)."""
    if n is None:
        return "?"
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n < 1024:
        return f"{sign}{n} bytes"
    for unit, factor in (("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30), ("TiB", 2**40)):
        if n < factor * 1024 or unit == "TiB":
            return f"{sign}{n / factor:.2f} {unit}"
    return f"{sign}{n} bytes"  # pragma: no cover - loop always returns
