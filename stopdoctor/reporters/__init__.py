"""One Report in, one string out per format (human, json, sarif, junit, github; reporters.formats). Never prints, never reads a model file. Imports core, rules, and the result types."""
