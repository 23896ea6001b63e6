"""The per-layer reading of a comparison (knowledge.md §17, §18): the table's rows as calls
in the model's data flow, the quantizers they pass through, and what the rows' numbers and
each call's own error say about where the error starts and of what kind."""
