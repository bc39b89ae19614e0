"""The only place that knows engines (transformers, vLLM, TGI, llama.cpp/Ollama): the stop ids each really uses, citing its source. Imports core, facts."""
