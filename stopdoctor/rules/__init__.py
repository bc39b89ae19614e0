"""The rules: a registry of permanent codes, each rule checking one typed input kind (rules.inputs), one runner, the results per command. Imports every stage before it."""
