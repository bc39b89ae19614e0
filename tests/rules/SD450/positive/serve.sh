vllm serve ./model --reasoning-parser deepseek_r1
