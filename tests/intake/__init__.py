"""Tests of the guided intake."""
