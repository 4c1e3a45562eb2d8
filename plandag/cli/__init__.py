"""The ``plandag`` command line."""

from plandag.cli.app import EXIT_CODES as EXIT_CODES
from plandag.cli.app import app as app
from plandag.cli.app import main as main

__all__ = ["EXIT_CODES", "app", "main"]
