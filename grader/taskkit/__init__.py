"""The task tools: ``new-task`` (a working skeleton), ``check-task`` (a task's rules, its case space and its
requirements), ``run-tests``, ``mutate`` (rubric strength), ``calibrate`` (against an earlier judge's labels) and
``validate`` (every rubric against its reference and base).

May import ``grader.drive``, ``grader.reports``, ``grader.pipeline``, ``grader.sandbox`` and ``grader.core``."""
