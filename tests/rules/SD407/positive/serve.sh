vllm serve ./model \
    --override-generation-config '{"eos_token_id": [271, 275], "temperature": 0.6}'
