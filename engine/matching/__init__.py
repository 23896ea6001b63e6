"""Rule matching: the rule book and its checks, the patterns, durable_rules in its worker process, the rule cache and the facts derived between strata."""
