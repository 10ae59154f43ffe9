"""``python -m zeus_run`` is the ``zeus-run`` command."""

from zeus_run.cli import main

if __name__ == "__main__":
    main()
