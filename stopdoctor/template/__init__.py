"""What a chat template writes: the sandbox (transformers' globals and filters, with limits) and the turn structure learned by rendering. Imports core, facts."""
