vllm serve ./model --reasoning-parser qwen3
