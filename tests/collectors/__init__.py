"""Tests of reading a case: case.yaml, stages, tables, scripts, dumps."""
