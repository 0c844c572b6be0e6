"""What drives the pipeline: one candidate (``one_candidate``), many on a backend (``many_candidates``, the Ray
backend ``ray_backend``), the task controls and their call budgets (``controls``), the caches (``store`` for
results, ``evidence_cache`` for evidence by tree) and the joining of shards (``merge``).

May import ``grader.reports``, ``grader.pipeline``, ``grader.sandbox`` and ``grader.core``."""
