"""Training labels built as TRL and Axolotl build them, and what they do to the end-of-turn token."""
