"""The program: ``oomdoctor`` (the console script) and ``python -m oomdoctor``.

A Ctrl-C while the program starts ends it as one while it runs does (one line, exit
130), not with the traceback of whichever import it cut short."""
import sys


def _cut_by_interrupt(exc: BaseException) -> bool:
    """Was this error a Ctrl-C that an import wrapped? (Python 3.11 raises a KeyboardInterrupt
    that comes while a class is made as "RuntimeError: Error calling __set_name__ ...", the
    interrupt its cause.)"""
    for _ in range(20):   # (a bound: a chain is short, and must not loop)
        if exc is None or isinstance(exc, KeyboardInterrupt):
            return exc is not None
        exc = exc.__cause__ or exc.__context__
    return False


def run() -> None:
    try:
        from .cli import main
    except BaseException as exc:
        if not _cut_by_interrupt(exc):
            raise
        sys.stderr.write("oomdoctor: interrupted\n")
        raise SystemExit(130) from None
    main()


if __name__ == "__main__":
    run()
