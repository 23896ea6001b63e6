"""Tests of the command line, batches, bundles, packaging."""
