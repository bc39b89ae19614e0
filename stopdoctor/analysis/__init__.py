"""Derived facts every rule shares: the safe-stop rule, base vs instruct, diagnosis of a generated text, the stop-string probe. Imports core, facts, template, runtimes."""
