"""What a reader sees, from the typed records: the change in words (``describe``), summaries (``summarize``,
``wording``), what a result means to CI (``outcome``), results.json and JUnit (``report``), scorecard pages
(``scorecard`` with the templates under ``grader/templates``) and the terminal (``terminal``).

May import ``grader.pipeline``, ``grader.sandbox`` and ``grader.core``."""
