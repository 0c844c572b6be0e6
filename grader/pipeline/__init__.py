"""The stages a candidate passes, in order: ``ingest`` (inputs into candidates; ``diffparse``), ``checkout`` (the
task's pinned base), ``apply`` (the diff, with per-hunk diagnostics; ``preview`` for cut bundle previews),
``integrity`` (tamper signals), ``run`` (the hidden tests in a judge, ``pytest_evidence`` inside it,
``traced_rerun`` for the lines a failing check ran) and ``score`` (pure functions from test statuses to criteria
and a verdict).

May import ``grader.core`` and ``grader.sandbox`` only."""
