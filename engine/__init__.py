"""Engine: rule loading, the durable_rules wrapper, diagnosis building, reports and the CLI."""
