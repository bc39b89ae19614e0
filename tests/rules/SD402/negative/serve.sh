vllm serve ./model --chat-template llama3.jinja
