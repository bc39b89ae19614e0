"""What each provider and telemetry shape calls its fields, and every finish reason spelling mapped
to the five that matter (`stop`, `length`, `tool_calls`, `content_filter`, `error`), the provider's
own value kept beside it (as OpenRouter's `native_finish_reason`).

Data only: the query (`logs.sql`) is generated from these tables, so a new shape or a new
spelling is one line here. Each path is a suffix under a response root (`$`, `$.response`,
`$.response.body`, ...); a choice's suffixes are relative to one choice (OpenAI `choices[i]`,
Gemini `candidates[i]`).

Imports: nothing.
"""

from __future__ import annotations

NORMALISED = ("stop", "length", "tool_calls", "content_filter", "error")

# Provider spelling (compared lower-cased) -> normalised reason. Sources: OpenAI chat/completions
# and Responses (`status`, `incomplete_details.reason`), vLLM/SGLang/TGI/llama.cpp/Ollama,
# Anthropic Messages `stop_reason`, Bedrock Converse `stopReason`, Gemini/Vertex `finishReason`
# and `promptFeedback.blockReason`, OpenTelemetry GenAI `gen_ai.response.finish_reasons`.
# A value not listed is kept as logged (lower-cased), never guessed.
FINISH_REASONS: dict[str, str] = {
    **dict.fromkeys(("stop", "eos", "eos_token", "stop_sequence", "stop_token", "word", "end_turn", "end",
                     "completed", "pause_turn", "finish_reason_stop"), "stop"),
    **dict.fromkeys(("length", "max_tokens", "limit", "max_length", "model_length", "max_new_tokens",
                     "max_output_tokens", "model_context_window_exceeded"), "length"),
    **dict.fromkeys(("tool_calls", "tool_call", "tool_use", "function_call"), "tool_calls"),
    **dict.fromkeys(("content_filter", "content_filtered", "safety", "recitation", "blocklist",
                     "prohibited_content", "spii", "image_safety", "image_prohibited_content", "image_recitation",
                     "language", "refusal", "guardrail_intervened"), "content_filter"),
    **dict.fromkeys(("error", "failed", "cancelled", "abort", "malformed_function_call", "unexpected_tool_call",
                     "too_many_tool_calls", "other", "finish_reason_unspecified", "blocked_reason_unspecified",
                     "incomplete", "image_other", "no_image",
                     # Anthropic's stream `error` event types
                     "api_error", "overloaded_error", "rate_limit_error", "invalid_request_error",
                     "authentication_error", "permission_error", "not_found_error", "request_too_large",
                     "timeout_error"), "error"),
}

# Response roots, most specific first: OpenAI batch output (`response.body`), Anthropic batch
# results (`result.message`), Bedrock batch output (`modelOutput`), a logged request+response
# pair (`response`), the line itself. Each root lists only the families seen there: every path
# is one lookup on every line.
RESPONSE_ROOTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("$.response.body", ("openai",)),
    ("$.result.message", ("anthropic",)),
    ("$.modelOutput", ("bedrock",)),
    ("$.response", ("openai", "gemini", "anthropic", "bedrock", "responses", "server")),
    ("$", ("openai", "gemini", "anthropic", "anthropic_stream", "bedrock", "responses", "server")),
)
REQUEST_ROOTS = ("$.request.body", "$.request", "$.modelInput")

# Per family, line-level fields (suffixes under a response root). `text_json` etc. are JSON
# texts of arrays the query reads a second time (only on lines of that family).
FAMILY_FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    "openai": {
        "model": (".model",), "created": (".created",), "id": (".id",), "object": (".object",),
        "output_tokens": (".usage.completion_tokens",),
        "reasoning_tokens": (".usage.completion_tokens_details.reasoning_tokens",),
        "second_choice": (".choices[1].index", ".choices[1].finish_reason"),
        "choice0": (".choices[0].index", ".choices[0].finish_reason", ".choices[0].message.role",
                    ".choices[0].delta.role", ".choices[0].text", ".choices[0].delta.content"),
    },
    "gemini": {
        "model": (".modelVersion",), "created": (".createTime",), "id": (".responseId",),
        "output_tokens": (".usageMetadata.candidatesTokenCount",),
        "reasoning_tokens": (".usageMetadata.thoughtsTokenCount",),
        "second_candidate": (".candidates[1].finishReason", ".candidates[1].index"),
        "candidate0": (".candidates[0].finishReason", ".candidates[0].content.parts"),
        "block_reason": (".promptFeedback.blockReason",),
    },
    "anthropic": {
        "anthropic_type": (".type",), "model": (".model",), "finish": (".stop_reason",),
        "stop_reason": (".stop_sequence",), "content_json": (".content",),
        "output_tokens": (".usage.output_tokens",),
    },
    # Anthropic Messages streamed (server-sent events, one event a line): `message_start` carries the
    # message's id and model, `content_block_delta` a piece of text or thinking, `message_delta` the
    # stop reason and the output tokens so far, `error` (`error.type`, e.g. overloaded_error) the
    # end of a stream that failed. Only `message_start` names its message: the other
    # events belong to the message started last.
    "anthropic_stream": {
        "event_type": (".type",), "stream_id": (".message.id",), "model": (".message.model",),
        "text": (".delta.text",), "reasoning": (".delta.thinking",), "finish": (".delta.stop_reason",),
        "stop_sequence": (".delta.stop_sequence",), "error_type": (".error.type",),
    },
    "bedrock": {
        "finish": (".stopReason",), "content_json": (".output.message.content",),
        "output_tokens": (".usage.outputTokens",),
    },
    "responses": {
        "responses_object": (".object",), "status": (".status",), "incomplete": (".incomplete_details.reason",),
        "model": (".model",), "created": (".created_at",), "output_json": (".output",),
        "output_tokens": (".usage.output_tokens",),
        "reasoning_tokens": (".usage.output_tokens_details.reasoning_tokens",),
        "max_tokens": (".max_output_tokens",),
    },
    "server": {  # Ollama, TGI /generate, llama.cpp /completion
        "model": (".model",), "created": (".created_at",),
        "ollama_text": (".message.content",), "ollama_finish": (".done_reason",),
        "ollama_reasoning": (".message.thinking", ".thinking"),
        "tgi_text": (".generated_text",), "tgi_finish": (".details.finish_reason",),
        "llamacpp_finish": (".stop_type",), "llamacpp_text": (".content",), "stopped_limit": (".stopped_limit",),
        "llamacpp_stop": (".stopping_word",),
        "output_tokens": (".eval_count", ".details.generated_tokens", ".tokens_predicted", ".timings.predicted_n"),
    },
}

# One OpenAI choice (`choices[i]`), chat, completions or a streamed chunk's delta.
OPENAI_CHOICE: dict[str, tuple[str, ...]] = {
    "text": (".message.content", ".text", ".delta.content"),
    "finish": (".finish_reason",),
    "stop_reason": (".stop_reason", ".matched_stop"),
    "reasoning": (".message.reasoning_content", ".message.reasoning", ".delta.reasoning_content", ".delta.reasoning"),
    "index": (".index",),
    "role": (".message.role",),
    # a tool call in the answer: with finish_reason stop (vLLM, llama.cpp, Ollama's OpenAI API) it is one
    "tool_call": (".message.tool_calls[0].function.name", ".message.function_call.name",
                  ".delta.tool_calls[0].function.name", ".delta.tool_calls[0].id"),
}
# One Gemini candidate (`candidates[i]`): its parts are read as JSON (text vs thought parts).
GEMINI_CANDIDATE: dict[str, tuple[str, ...]] = {
    "finish": (".finishReason",), "index": (".index",), "parts": (".content.parts",),
}

REQUEST_FIELDS: dict[str, tuple[str, ...]] = {
    "max_tokens": (".max_tokens", ".max_completion_tokens", ".max_output_tokens", ".options.num_predict",
                   ".parameters.max_new_tokens", ".n_predict", ".inferenceConfig.maxTokens",
                   ".generationConfig.maxOutputTokens", ".generation_config.max_output_tokens"),
    "model": (".model", ".modelId"),
}

# Timestamps a log pipeline writes beside the response (ISO text or Unix seconds/ms/µs/ns).
LINE_TIMESTAMPS = ("$.timestamp", "$.time", '$."@timestamp"', "$.request_time")

ANTHROPIC_EVENTS = ("message_start", "content_block_start", "content_block_delta", "content_block_stop",
                    "message_delta", "message_stop", "ping", "error")
# Shapes whose lines are pieces of one answer, grouped by stream (`logs.records.streams_sql`).
# A Gemini line is a whole response or one chunk of a stream (`streamGenerateContent`: every
# chunk a response with the same `responseId`, only the last with a finishReason): lines of one id
# are one stream (`gemini-stream`) while every line but the last has no finishReason; a line with
# one ends its answer, so a whole response logged twice is two answers.
STREAMED = ("openai-chat-stream", "anthropic-stream", "gemini")

# OpenTelemetry GenAI semantic conventions (attribute names), read from an OTLP JSON export
# (`ExportTraceServiceRequest`, one per line: resourceSpans[].scopeSpans[].spans[], attributes as
# key/AnyValue lists) or from a flattened span a log pipeline writes (attributes as one object,
# under `attributes` or at the top level).
OTEL = {
    "finish_reasons": "gen_ai.response.finish_reasons",
    "max_tokens": "gen_ai.request.max_tokens",
    "output_tokens": "gen_ai.usage.output_tokens",
    "reasoning_tokens": "gen_ai.usage.reasoning_tokens",
    "response_model": "gen_ai.response.model",
    "request_model": "gen_ai.request.model",
    "stop_sequences": "gen_ai.request.stop_sequences",
    "operation": "gen_ai.operation.name",
    "output_messages": "gen_ai.output.messages",
    "error_type": "error.type",
}
OTEL_FLAT_ROOTS = ("$.attributes", "$")
# Operations whose span is a generation (not embeddings, not a tool execution).
OTEL_GENERATIONS = ("chat", "text_completion", "generate_content")
