"""What commands do beyond judging: render, probe, generate (the only place that loads torch models, lazily), labels, logs, edits. Imports the stages before it."""
