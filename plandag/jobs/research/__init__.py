"""Research over a corpus: ``plandag research QUESTION --corpus DIR`` (docs/guides/research.md).

The parts: :mod:`~plandag.jobs.research.corpus` (the folder's documents, chunked and
indexed for BM25), :mod:`~plandag.jobs.research.tools` (``search``, ``read`` and the
citation checks, registered through the ``plandag.tools`` entry point ``research``),
:mod:`~plandag.jobs.research.citations` (quotes found in their chunks, offsets computed in
code), :mod:`~plandag.jobs.research.planning` (what the planner is told) and
:mod:`~plandag.jobs.research.report` (the Markdown report and JSON record, built from the
run store).
"""
