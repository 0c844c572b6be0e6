"""Task authoring tools: a task's declared environment, ``new-task`` (a working skeleton) and ``check-task``.

Kept apart from grading: the engine imports only ``grader.taskkit.requirements`` (the environment check)."""
