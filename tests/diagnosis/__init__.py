"""Tests of the verdicts: stage, next actions, strategy, checklist, layer reading, code."""
