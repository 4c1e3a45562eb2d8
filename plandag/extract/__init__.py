"""Batch extraction jobs built on stored plans (``plandag extract ...``)."""
