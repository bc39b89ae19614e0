"""`python -m stopdoctor`: the command line."""

from stopdoctor.cli import main

main()
