"""The command line: one entry point, the batch and support-bundle commands, and where their output goes."""
