"""Collectors: each module turns one source (case file, environment, files) into typed facts."""
