"""stopdoctor: diagnose LLM generation that never stops, or stops too early.

Imports nothing heavy: `import stopdoctor` must stay cheap for the static commands.
"""

__version__ = "0.1.0"
