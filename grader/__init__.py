"""grader: rubric-driven, execution-backed grading of candidate patches to vLLM."""

__version__ = "0.1.0"
