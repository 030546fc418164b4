"""oomdoctor: read the log of a failed training job, say what ran out of memory and how to fix it.

    >>> import oomdoctor
    >>> report = oomdoctor.diagnose("job.log")          # a path, bytes, text or a stream
    >>> report.top.incident, report.top.remediations[0].knob.setting
"""
from __future__ import annotations

__version__ = "0.1.0"

import os
from typing import TYPE_CHECKING, Optional, Union

if TYPE_CHECKING:  # annotations only: `import oomdoctor` stays cheap for job wrappers
    from typing import IO

    from .report.model import Report

from ._moved import install as _install_moved

_install_moved()  # old module paths (oomdoctor.reader, ...) keep working, with a warning

__all__ = ["__version__", "diagnose", "scan", "Report", "InputError", "watch", "install_excepthook"]


def diagnose(source: Union[str, bytes, "os.PathLike[str]", "IO[bytes]", "IO[str]"], *,
             framework: Optional[str] = None, kb_dirs: Optional[list] = None,
             text: Optional[bool] = None) -> Report:
    """Diagnose one log and return a :class:`oomdoctor.report.Report`.

    ``source`` is a path (``"-"`` for stdin), ``bytes`` of log text, a binary or text stream
    (``open(path)``, ``io.StringIO``), or a ``str`` holding the log itself. A ``str`` with a
    line break is log text; a one-line ``str`` is a path (a missing file raises
    ``InputError``, so a typo never reads as an empty log) unless ``text=True``. Anything
    else raises ``TypeError``.
    """
    import io

    from .kb.knowledge import load_knowledge
    from .pipeline import diagnose_source

    if isinstance(source, str) and (text or (text is None and "\n" in source)):
        source = source.encode("utf-8", errors="replace")
    elif isinstance(source, io.TextIOBase) or (hasattr(source, "read") and getattr(source, "encoding", None)
                                               and not hasattr(source, "readinto")):
        source = _TextAsBytes(source)
    elif not isinstance(source, (str, bytes, bytearray, os.PathLike)) and not hasattr(source, "read"):
        raise TypeError(f"diagnose() takes a path, bytes, a stream or the log text, not {type(source).__name__}")
    kb = load_knowledge(kb_dirs) if kb_dirs else None
    return diagnose_source(source, knowledge=kb, framework=framework)


class _TextAsBytes:
    """A text stream read as UTF-8 bytes, a chunk at a time (large logs stay bounded)."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self.name = getattr(stream, "name", None)

    def read(self, n: int = -1) -> bytes:
        return self._stream.read(n if n is None or n < 0 else max(1, n // 4)).encode("utf-8", errors="replace")

    def close(self) -> None:
        self._stream.close()


def __getattr__(name):  # lazy: keep `import oomdoctor` cheap for job wrappers
    if name == "Report":
        from .report.model import Report
        return Report
    if name == "InputError":  # raised for input that cannot be read (missing, binary, ...)
        from .read.reader import InputError
        return InputError
    if name == "scan":  # the subpackage is callable: oomdoctor.scan(paths, ...) yields records
        import importlib
        return importlib.import_module(".scan", __name__)
    if name in ("watch", "install_excepthook"):
        import importlib
        module = importlib.import_module(".wrap.watch", __name__)
        value = getattr(module, name)
        globals()[name] = value  # replaces the submodule binding that the import just made
        return value
    raise AttributeError(name)
