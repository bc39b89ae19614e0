vllm serve ./model \
    --override-generation-config '{"temperature": 0.6}'
