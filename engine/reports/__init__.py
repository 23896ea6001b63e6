"""Rendering a Diagnosis: one view model, one format dispatcher, and the Markdown, HTML, terminal, SARIF and JUnit renderings, with their plots and schemas."""
