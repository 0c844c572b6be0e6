"""The ground floor: the typed records, the rubric schema, paths, the environment and one identity, shared by
every wing.

Imports nothing of grader outside ``grader.core``."""
