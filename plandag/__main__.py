"""``python -m plandag`` runs the command line."""

from plandag.cli import main

main()
