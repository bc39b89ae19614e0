"""What the files say: resolve a model spec, read HF files, GGUF and safetensors headers, serving configs; each value with its file, key and line. Imports core."""
