vllm serve ./model --chat-template chatml.jinja
