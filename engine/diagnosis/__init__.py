"""From facts to the Diagnosis: run the rules, resolve the conclusion, assemble the report data, the next actions' code, and what changed between two reports."""
