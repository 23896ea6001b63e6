"""Tests of hostile, damaged and fuzzed inputs."""
