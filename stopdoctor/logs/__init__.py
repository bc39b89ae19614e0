"""Response logs read with DuckDB: finish reasons, budget cuts, runaway turns."""
