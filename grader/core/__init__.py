"""The ground floor: records, rubric schema and identity that every stage shares; imports nothing else of grader."""
