"""Tests of what the reports say and how they render, in every format and language."""
