"""Where candidate code runs and where verdicts are decided, apart: the judge process (``judge``), the subjects
that import the candidate's tree (``subject``, ``zygote``, ``forkserver``), their launch, containment, budgets and
clocks (``launch``, ``contain``, ``budget``, ``timing``, ``watchdog``) and the channel between them.

May import ``grader.core`` only."""
