"""``python -m fedlib.engines.flower``: the command line (:func:`fedlib.engines.flower.cli.main`)."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
