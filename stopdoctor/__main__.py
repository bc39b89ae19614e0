"""`python -m stopdoctor` and the `stopdoctor` script: the command line, its process settings made
before the command's modules are imported (`core.process.tune_for`)."""

import sys

from stopdoctor.core.process import tune_for


def main() -> None:
    tune_for(sys.argv[1:])
    from stopdoctor.cli import main as run_command

    run_command()


if __name__ == "__main__":
    main()
