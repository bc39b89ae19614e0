"""The file writers `fix` uses: staged, atomic edits of a model folder's JSON files, serving files
and GGUF headers (`edits`), and a GGUF integer key rewritten in place with the tensor data byte for
byte the same (`gguf_edit`). Nothing else writes into a model folder.

Imports: core, facts.
"""
