"""Renderers: pure functions from a result to a string (people: rich text; machines: JSON).

Imports: api results, report, checks (for rule docs). Never prints.
"""
