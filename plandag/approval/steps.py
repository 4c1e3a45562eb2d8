"""Step-by-step decisions in an approval request: :mod:`plandag.scheduler.decisions`, whose
names this module hands on (the scheduler applies them, so they live below it).
"""

from plandag.scheduler.decisions import Amendment as Amendment
from plandag.scheduler.decisions import StepDecision as StepDecision
from plandag.scheduler.decisions import StepVerdict as StepVerdict
from plandag.scheduler.decisions import amend as amend
from plandag.scheduler.decisions import step_decisions as step_decisions

__all__ = ["Amendment", "StepDecision", "StepVerdict", "amend", "step_decisions"]
