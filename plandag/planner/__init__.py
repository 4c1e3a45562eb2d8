"""The LLM side of plandag on the model layer (:mod:`plandag.models`): the planner,
streaming dispatch, the replanner and the joiner."""
