"""plandag against a sequential ReAct agent, on simulated and real models
(the comparison of LLMCompiler, Kim et al., ICML 2024).

* :mod:`plandag.bench.workloads`: the workloads, each with a checkable right answer;
* :mod:`plandag.bench.simulator`: the local Messages API server playing a correct model
  for both agents with the same latency model, calibrated to the LLMCompiler paper;
* :mod:`plandag.bench.runner`: runs both agents on each workload, interleaved, and reports
  (table, ``RESULTS.md``, PNG chart), prompt caching off and on;
* :mod:`plandag.bench.tasks`: the user's own tasks (a JSON Lines file, each line a goal and
  a check of the right answer) as workloads.

``plandag bench`` (:mod:`plandag.cli.bench_command`) is the command line.
"""
