"""The program: ``oomdoctor`` (the console script) and ``python -m oomdoctor``.

A Ctrl-C while the program starts ends it as one while it runs does (one line, exit
130), not with the traceback of whichever import it cut short."""
import sys


def run() -> None:
    try:
        from .cli import main
    except KeyboardInterrupt:
        sys.stderr.write("oomdoctor: interrupted\n")
        raise SystemExit(130) from None
    main()


if __name__ == "__main__":
    run()
