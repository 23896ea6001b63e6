"""Tests of the package's layout: its floors and what imports what."""
