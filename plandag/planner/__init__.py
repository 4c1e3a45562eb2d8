"""The LLM side of plandag: the model client layer (:mod:`plandag.planner.llm`),
the planner, streaming dispatch, the replanner and the joiner."""
