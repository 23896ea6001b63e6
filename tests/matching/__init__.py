"""Tests of the rule book, the matcher and its worker process, the caches."""
