"""The program: ``oomdoctor`` (the console script) and ``python -m oomdoctor``.

A Ctrl-C while the program starts ends it as one while it runs does (one line, exit
130), not with the traceback of whichever import it cut short."""
import sys


def _cut_by_interrupt(exc: BaseException) -> bool:
    """Was this error a Ctrl-C that an import wrapped? (Python 3.11 raises a KeyboardInterrupt
    that comes while a class is made as "RuntimeError: Error calling __set_name__ ...", the
    interrupt its cause.)"""
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def run() -> None:
    try:
        from .cli import main
    except Exception as exc:
        if not _cut_by_interrupt(exc):
            raise
        sys.stderr.write("oomdoctor: interrupted\n")
        raise SystemExit(130) from None
    except KeyboardInterrupt:
        sys.stderr.write("oomdoctor: interrupted\n")
        raise SystemExit(130) from None
    main()


if __name__ == "__main__":
    run()
