"""Tests of qcdoctor.probe on torch models."""
