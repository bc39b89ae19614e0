"""The normalising query: engine-neutral DuckDB SQL from log lines of JSON text to one record per
answer (every choice of an n > 1 response; a streamed response's chunks grouped by `id` into one),
each field picked from whichever shape the line has (`logs.shapes`), the finish reason
normalised with the provider's own value kept beside it, and the flags the problems are counted
from (`logs.flags`). It runs unchanged on a bigger DuckDB (`--show-sql`).

The first parse of a line reads every scalar path at once (one yyjson parse); arrays that need
a second look (Anthropic/Bedrock content blocks, Gemini parts, Responses output items, OTLP spans,
the choices of an n > 1 response) are read again only on lines of that shape.

Imports: logs (flags, groups, shapes, sql, vocabulary). Builds text only; runs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from stopdoctor.logs.shapes import ANTHROPIC_EVENTS, FAMILY_FIELDS, GEMINI_CANDIDATE, LINE_TIMESTAMPS, OPENAI_CHOICE, OTEL, OTEL_FLAT_ROOTS, OTEL_GENERATIONS, REQUEST_FIELDS, REQUEST_ROOTS, RESPONSE_ROOTS
from stopdoctor.logs.groups import group_sql, kept
from stopdoctor.logs.flags import derived_sql
from stopdoctor.logs.sql import sql_string, whole_number_sql
from stopdoctor.logs.vocabulary import TurnVocabulary

# A path a key group cannot have. DuckDB folds it away; an array helper given it returns it as it
# is (a folded NULL as a lambda's list does not bind).
_NULL = "CAST(NULL AS VARCHAR)"


class _Lookups:
    """The flat list of JSON paths read from each line in one parse; `ref` is a path's place."""

    def __init__(self, group: frozenset[str] | None = None) -> None:
        self.paths: list[str] = []
        self.group = group  # a key group's anchors (`logs.groups`): paths it cannot have are NULL

    def ref(self, path: str) -> str:
        if self.group is not None and not kept(path, self.group):
            return _NULL
        if path not in self.paths:
            self.paths.append(path)
        return f"v[{self.paths.index(path) + 1}]"

    def first(self, paths) -> str:
        refs = [r for r in dict.fromkeys(self.ref(p) for p in paths) if r != _NULL]
        if not refs:
            return _NULL
        return refs[0] if len(refs) == 1 else f"coalesce({', '.join(refs)})"


def _under(root: str, suffix: str) -> str:
    return ("$" if root == "$" else root) + suffix


def _family(lookups: _Lookups, family: str, field: str) -> str:
    """A family's field, from the first root that has it (most specific root first)."""
    return lookups.first(_under(root, s) for root, families in RESPONSE_ROOTS if family in families
                         for s in FAMILY_FIELDS[family].get(field, ()))


def _choice0(lookups: _Lookups, table: Mapping[str, tuple[str, ...]], array: str, field: str) -> str:
    return lookups.first(_under(root, f".{array}[0]" + s) for root, families in RESPONSE_ROOTS
                         if ("openai" if array == "choices" else "gemini") in families for s in table[field])


def _array_of(lookups: _Lookups, family: str, probe: str, array: str) -> str:
    """The elements of `array` (JSON list) under the root where `probe` was found: read again."""
    probes = [(_family_probe(lookups, root, family, probe), root) for root, families in RESPONSE_ROOTS
              if family in families]
    whens = [f"WHEN {ref} IS NOT NULL THEN json_extract(line, {sql_string(_under(root, array) + '[*]')})"
             for ref, root in probes if ref != _NULL]
    return "CASE " + " ".join(whens) + " END" if whens else "CAST(NULL AS JSON[])"


def _family_probe(lookups: _Lookups, root: str, family: str, field: str) -> str:
    return lookups.first(_under(root, s) for s in FAMILY_FIELDS[family][field])


# --------------------------------------------------------------------------------------------
# Second looks at arrays (SQL expressions over a JSON text)
# --------------------------------------------------------------------------------------------


def _join(items: str) -> str:
    return f"array_to_string({items}, '')"


def _gemini_parts(parts: str, thought: bool) -> str:
    test = "=" if thought else "<>"
    if parts == _NULL:
        return _NULL
    return (f"CASE WHEN {parts} IS NOT NULL THEN " + _join(
        f"list_transform(list_filter(json_extract({parts}, '$[*]'), lambda p: "
        f"coalesce(json_extract_string(p, '$.thought'), 'false') {test} 'true'), "
        "lambda p: coalesce(json_extract_string(p, '$.text'), ''))") + " END")


def _blocks(content: str, path: str) -> str:
    if content == _NULL:
        return _NULL
    return f"CASE WHEN {content} IS NOT NULL THEN {_join(f'json_extract_string({content}, {sql_string(path)})')} END"


def _responses_items(output: str, kind: str, path: str) -> str:
    if output == _NULL:
        return _NULL
    return (f"CASE WHEN {output} IS NOT NULL THEN " + _join(
        f"list_transform(list_filter(json_extract({output}, '$[*]'), lambda o: json_extract_string(o, '$.type') = "
        f"{sql_string(kind)}), lambda o: {_join(f'json_extract_string(o, {sql_string(path)})')})") + " END")


# A logged time outside these years is a placeholder or a unit mistake, not when an answer was
# made: it counts as no time (and stays inside the dates Python and Spark can hold).
TIMES_FROM, TIMES_UNTIL = "1990-01-01", "2200-01-01"


def _timestamp(expr: str) -> str:
    """ISO text or Unix time in seconds, ms, µs or ns (told apart by size), as a UTC TIMESTAMP;
    NULL outside `TIMES_FROM`..`TIMES_UNTIL`."""
    # the number cast once (a lambda's argument), not once a comparison
    parsed = (f"CASE WHEN {expr} IS NOT NULL THEN list_transform([try_cast({expr} AS DOUBLE)], lambda d: "
              "CASE WHEN d IS NOT NULL THEN try(make_timestamp(CAST("
              "CASE WHEN d > 1e17 THEN d / 1000 WHEN d > 1e14 THEN d WHEN d > 1e11 THEN d * 1000 "
              f"ELSE d * 1000000 END AS BIGINT))) ELSE try(try_cast({expr} AS TIMESTAMPTZ) AT TIME ZONE 'UTC') END)[1] END")
    return (f"list_filter([{parsed}], lambda t: t >= TIMESTAMP '{TIMES_FROM}' AND t < TIMESTAMP '{TIMES_UNTIL}')[1]")


# --------------------------------------------------------------------------------------------
# The query
# --------------------------------------------------------------------------------------------

_COLUMNS = ("line_no", "choice", "blank", "kind", "finish_raw", "finish_hint", "text", "reasoning", "model",
            "max_tokens", "output_tokens", "reasoning_tokens", "stop_reason", "ts", "multi_choice", "stream_id")


def _line_fields(lk: _Lookups, overrides: Mapping[str, str]) -> dict[str, str]:
    """Per line: the shape (`kind`) and every field of the first answer, from the first parse."""
    fam = lambda family, field: _family(lk, family, field)  # noqa: E731
    oc = lambda field: _choice0(lk, OPENAI_CHOICE, "choices", field)  # noqa: E731
    gc = lambda field: _choice0(lk, GEMINI_CANDIDATE, "candidates", field)  # noqa: E731
    request = lambda field: lk.first(r + s for r in REQUEST_ROOTS for s in REQUEST_FIELDS[field])  # noqa: E731
    stopped_limit = fam("server", "stopped_limit")
    otel_flat = lk.first(f'{root}."{OTEL[k]}"' for root in OTEL_FLAT_ROOTS for k in ("finish_reasons", "operation"))
    kind = ("CASE WHEN v IS NULL THEN NULL "
            "WHEN " + lk.ref("$.resourceSpans") + " IS NOT NULL OR " + lk.ref("$.attributes[0].key") + " IS NOT NULL "
            "THEN 'otlp' "
            f"WHEN {otel_flat} IS NOT NULL THEN 'otel' "
            f"WHEN {fam('openai', 'object')} = 'chat.completion.chunk' OR {oc('text')} IS NULL AND "
            f"{lk.first(_under(r, '.choices[0].delta.role') for r, fs in RESPONSE_ROOTS if 'openai' in fs)} IS NOT NULL "
            "THEN 'openai-chat-stream' "
            f"WHEN {lk.first(_under(r, s) for r, fs in RESPONSE_ROOTS if 'openai' in fs for s in ('.choices[0].message.role', '.choices[0].message.content', '.choices[0].delta.content'))} IS NOT NULL "
            "THEN 'openai-chat' "
            f"WHEN {lk.first(_under(r, '.choices[0].text') for r, fs in RESPONSE_ROOTS if 'openai' in fs)} IS NOT NULL "
            "THEN 'openai-completions' "
            f"WHEN {fam('responses', 'responses_object')} = 'response' THEN 'openai-responses' "
            f"WHEN {fam('anthropic_stream', 'event_type')} IN ({', '.join(sql_string(e) for e in ANTHROPIC_EVENTS)}) "
            "THEN 'anthropic-stream' "
            f"WHEN {fam('anthropic', 'anthropic_type')} = 'message' AND {fam('anthropic', 'content_json')} IS NOT NULL "
            "THEN 'anthropic' "
            f"WHEN {fam('bedrock', 'finish')} IS NOT NULL THEN 'bedrock-converse' "
            f"WHEN {gc('finish')} IS NOT NULL OR {gc('parts')} IS NOT NULL OR {fam('gemini', 'block_reason')} IS NOT NULL "
            "THEN 'gemini' "
            f"WHEN {fam('server', 'ollama_finish')} IS NOT NULL OR {fam('server', 'ollama_text')} IS NOT NULL THEN 'ollama' "
            f"WHEN {fam('server', 'tgi_text')} IS NOT NULL OR {fam('server', 'tgi_finish')} IS NOT NULL THEN 'tgi' "
            f"WHEN {fam('server', 'llamacpp_finish')} IS NOT NULL OR {stopped_limit} IS NOT NULL THEN 'llama.cpp' "
            f"WHEN {oc('finish')} IS NOT NULL OR {fam('server', 'llamacpp_text')} IS NOT NULL THEN 'other' END")
    responses_status = fam("responses", "status")
    responses_output = fam("responses", "output_json")
    content = fam("anthropic", "content_json")
    bedrock_content = fam("bedrock", "content_json")
    parts = gc("parts")
    finish = (f"CASE kind WHEN 'openai-responses' THEN CASE WHEN {responses_status} = 'incomplete' THEN "
              f"coalesce({fam('responses', 'incomplete')}, 'incomplete') ELSE {responses_status} END "
              f"WHEN 'anthropic-stream' THEN coalesce({fam('anthropic_stream', 'finish')}, CASE WHEN "
              f"{fam('anthropic_stream', 'event_type')} = 'error' THEN coalesce({fam('anthropic_stream', 'error_type')}, "
              "'error') END) "
              f"WHEN 'anthropic' THEN {fam('anthropic', 'finish')} WHEN 'bedrock-converse' THEN {fam('bedrock', 'finish')} "
              f"WHEN 'gemini' THEN coalesce({gc('finish')}, {fam('gemini', 'block_reason')}) "
              f"WHEN 'ollama' THEN {fam('server', 'ollama_finish')} WHEN 'tgi' THEN {fam('server', 'tgi_finish')} "
              f"WHEN 'llama.cpp' THEN coalesce({fam('server', 'llamacpp_finish')}, CASE {stopped_limit} "
              "WHEN 'true' THEN 'limit' WHEN 'false' THEN 'stop' END) "
              f"ELSE {oc('finish')} END")
    openai_tool = oc("tool_call")
    hints = ([] if openai_tool == _NULL else [
        # `stop` with a tool call is a tool call; a chunk's call waits for its stream's finish (`streams_sql`)
        f"WHEN kind = 'openai-chat' AND lower({oc('finish')}) = 'stop' AND {openai_tool} IS NOT NULL THEN 'tool_calls'",
        f"WHEN kind = 'openai-chat-stream' AND {openai_tool} IS NOT NULL THEN 'tool_calls'"]
    ) + ([] if responses_output == _NULL else [
        f"WHEN kind = 'openai-responses' AND {responses_status} = 'completed' AND list_has_any("
        f"json_extract_string({responses_output}, '$[*].type'), ['function_call', 'custom_tool_call']) THEN 'tool_calls'"]
    ) + ([] if parts == _NULL else [
        # a Gemini line with a function call; `streams_sql` keeps it only when the answer's finish is STOP
        f"WHEN kind = 'gemini' AND {parts} IS NOT NULL AND len(json_extract_string({parts}, '$[*].functionCall.name')) > 0 "
        "THEN 'tool_calls'"])
    hint = "CASE " + " ".join(hints) + " END" if hints else _NULL
    # The shapes whose answer is one scalar path (OpenAI chat/completions, Ollama, TGI, llama.cpp).
    # Ollama /api/generate's `response`, read apart on those lines only: on a request+response pair
    # it is an object, which a read of every line would write out as text.
    scalar_text = (f"WHEN 'ollama' THEN coalesce({fam('server', 'ollama_text')}, json_extract_string(line, '$.response')) "
                   f"WHEN 'tgi' THEN {fam('server', 'tgi_text')} "
                   f"WHEN 'llama.cpp' THEN {fam('server', 'llamacpp_text')} "
                   f"ELSE coalesce({oc('text')}, {fam('server', 'llamacpp_text')})")
    scalar_reasoning = f"WHEN 'ollama' THEN {fam('server', 'ollama_reasoning')} ELSE {oc('reasoning')}"
    text = (f"CASE kind WHEN 'openai-responses' THEN {_responses_items(responses_output, 'message', '$.content[*].text')} "
            f"WHEN 'anthropic' THEN {_blocks(content, '$[*].text')} "
            f"WHEN 'anthropic-stream' THEN {fam('anthropic_stream', 'text')} "
            f"WHEN 'bedrock-converse' THEN {_blocks(bedrock_content, '$[*].text')} "
            f"WHEN 'gemini' THEN {_gemini_parts(parts, False)} {scalar_text} END")
    reasoning = (f"CASE kind WHEN 'openai-responses' THEN nullif({_responses_items(responses_output, 'reasoning', '$.summary[*].text')} "
                 f"|| {_responses_items(responses_output, 'reasoning', '$.content[*].text')}, '') "
                 f"WHEN 'anthropic' THEN nullif({_blocks(content, '$[*].thinking')}, '') "
                 f"WHEN 'anthropic-stream' THEN {fam('anthropic_stream', 'reasoning')} "
                 f"WHEN 'bedrock-converse' THEN nullif({_blocks(bedrock_content, '$[*].reasoningContent.reasoningText.text')}, '') "
                 f"WHEN 'gemini' THEN nullif({_gemini_parts(parts, True)}, '') {scalar_reasoning} END")
    families = ("openai", "responses", "anthropic", "bedrock", "server")
    output_tokens = lk.first(_under(r, s) for r, fs in RESPONSE_ROOTS for f in families if f in fs
                             for s in FAMILY_FIELDS[f].get("output_tokens", ()))
    gemini_out = f"{whole_number_sql(fam('gemini', 'output_tokens'))} + coalesce({whole_number_sql(fam('gemini', 'reasoning_tokens'))}, 0)"
    reasoning_tokens = lk.first(_under(r, s) for r, fs in RESPONSE_ROOTS for f in ("openai", "responses", "gemini")
                                if f in fs for s in FAMILY_FIELDS[f].get("reasoning_tokens", ()))
    model = lk.first([_under(r, s) for r, fs in RESPONSE_ROOTS for f in ("openai", "gemini", "anthropic", "responses",
                                                                          "server", "anthropic_stream") if f in fs
                      for s in FAMILY_FIELDS[f].get("model", ())] + [r + s for r in REQUEST_ROOTS for s in REQUEST_FIELDS["model"]])
    created = lk.first([_under(r, s) for r, fs in RESPONSE_ROOTS for f in ("openai", "gemini", "responses", "server")
                        if f in fs for s in FAMILY_FIELDS[f].get("created", ())] + list(LINE_TIMESTAMPS))
    multi = (f"{_family(lk, 'openai', 'second_choice')} IS NOT NULL AND kind LIKE 'openai%' OR "
             f"{_family(lk, 'gemini', 'second_candidate')} IS NOT NULL AND kind = 'gemini'")
    fields = {
        "kind": kind, "finish_raw": finish, "finish_hint": hint, "text": text, "reasoning": reasoning,
        "model": model,
        "max_tokens": f"coalesce({request('max_tokens')}, {fam('responses', 'max_tokens')})",
        "output_tokens": f"CASE WHEN kind = 'gemini' THEN {gemini_out} ELSE {whole_number_sql(output_tokens)} END",
        "reasoning_tokens": whole_number_sql(reasoning_tokens),
        "stop_reason": (f"CASE kind WHEN 'anthropic' THEN {fam('anthropic', 'stop_reason')} "
                        f"WHEN 'anthropic-stream' THEN {fam('anthropic_stream', 'stop_sequence')} WHEN 'llama.cpp' THEN "
                        f"{fam('server', 'llamacpp_stop')} ELSE coalesce({oc('stop_reason')}, {fam('server', 'llamacpp_stop')}) END"),
        "ts": _timestamp(created),
        "multi_choice": f"coalesce({multi}, false)",
        # An Anthropic event other than message_start has no id: `streams_sql` gives it the last one.
        "stream_id": (f"CASE kind WHEN 'openai-chat-stream' THEN coalesce({fam('openai', 'id')}, 'line ' || line_no) "
                      f"WHEN 'anthropic-stream' THEN {fam('anthropic_stream', 'stream_id')} "
                      f"WHEN 'gemini' THEN coalesce({fam('gemini', 'id')}, 'line ' || line_no) END"),
        "choice": (f"CASE kind WHEN 'openai-chat-stream' THEN coalesce({whole_number_sql(oc('index'))}, 0) "
                   f"WHEN 'gemini' THEN coalesce({whole_number_sql(gc('index'))}, 0) ELSE 0 END"),
        "openai_choices": _array_of(lk, "openai", "second_choice", ".choices"),
        "gemini_candidates": _array_of(lk, "gemini", "second_candidate", ".candidates"),
    }
    if overrides:
        names = {"finish_reason": "finish_raw", "timestamp": "ts"}
        for name, path in overrides.items():
            ref = lk.ref(path)
            column = names.get(name, name)
            fields[column] = {"ts": _timestamp(ref), "output_tokens": whole_number_sql(ref),
                              "reasoning_tokens": whole_number_sql(ref)}.get(column, ref)
        fields.update(finish_hint="NULL", multi_choice="false", stream_id="NULL", choice="0")
        fields["custom_kind"] = "true"
    return fields


_ANSWER = {"choice": "INTEGER", "kind": "VARCHAR", "finish_raw": "VARCHAR", "finish_hint": "VARCHAR",
           "text": "VARCHAR", "reasoning": "VARCHAR", "model": "VARCHAR", "max_tokens": "VARCHAR",
           "output_tokens": "BIGINT", "reasoning_tokens": "BIGINT", "stop_reason": "VARCHAR", "ts": "TIMESTAMP",
           "multi_choice": "BOOLEAN", "stream_id": "VARCHAR"}


def _answer(fields: Mapping[str, str]) -> str:
    """One answer as a struct (the same type from every shape, so a line is a list of them)."""
    return "struct_pack(" + ", ".join(f"{name} := CAST({fields.get(name, 'NULL')} AS {kind})"
                                      for name, kind in _ANSWER.items()) + ")"


def _choices_list(line: Mapping[str, str]) -> str:
    """Every choice of an n > 1 response (OpenAI choices, Gemini candidates), read again."""
    def get(table, field: str, c: str = "c") -> str:
        return "coalesce(" + ", ".join(f"json_extract_string({c}, {sql_string('$' + s)})" for s in table[field]) + ")"

    shared = {k: line[k] for k in ("model", "max_tokens", "output_tokens", "reasoning_tokens", "ts", "stream_id")}
    openai = _answer({**shared, "choice": "coalesce(try_cast(" + get(OPENAI_CHOICE, "index") + " AS INTEGER), i - 1)",
                      "kind": "kind", "finish_raw": get(OPENAI_CHOICE, "finish"),
                      "finish_hint": f"CASE WHEN lower({get(OPENAI_CHOICE, 'finish')}) = 'stop' AND "
                                     f"{get(OPENAI_CHOICE, 'tool_call')} IS NOT NULL THEN 'tool_calls' END",
                      "text": get(OPENAI_CHOICE, "text"),
                      "reasoning": get(OPENAI_CHOICE, "reasoning"), "stop_reason": get(OPENAI_CHOICE, "stop_reason"),
                      "multi_choice": "true"})
    parts = get(GEMINI_CANDIDATE, "parts")
    gemini = _answer({**shared, "choice": "i - 1", "kind": "kind", "finish_raw": get(GEMINI_CANDIDATE, "finish"),
                      "finish_hint": f"CASE WHEN len(json_extract_string({parts}, '$[*].functionCall.name')) > 0 "
                                     "THEN 'tool_calls' END",
                      "text": _gemini_parts(parts, False), "reasoning": f"nullif({_gemini_parts(parts, True)}, '')",
                      "multi_choice": "true"})
    return (f"CASE WHEN kind = 'gemini' THEN list_transform(gemini_candidates, lambda c, i: {gemini}) "
            f"ELSE list_transform(openai_choices, lambda c, i: {openai}) END")


def _otel_list(lk: _Lookups) -> str:
    """Every answer of each GenAI span of a line: OTLP JSON (attributes as key/AnyValue lists,
    spans under resourceSpans[].scopeSpans[], or one span a line) or a flattened span (attributes
    as one object, under `attributes` or at the top). `gen_ai.response.finish_reasons` holds one
    reason a choice; a generation span without it is one answer with no reason (or `error.type`)."""
    def attribute(key: str) -> str:
        return (f"list_filter(json_extract(s, '$.attributes[*]'), lambda a: json_extract_string(a, '$.key') = "
                f"{sql_string(OTEL[key])})[1]")

    def otlp(key: str) -> str:
        a = attribute(key)
        return (f"coalesce(json_extract_string({a}, '$.value.stringValue'), json_extract_string({a}, '$.value.intValue'), "
                f"json_extract_string({a}, '$.value.doubleValue'))")

    def flat(key: str) -> str:
        return lk.first(f'{root}."{OTEL[key]}"' for root in OTEL_FLAT_ROOTS)

    def reasons(array_or_text: str) -> str:
        if array_or_text == _NULL:
            return "CAST([] AS VARCHAR[])"
        return (f"CASE WHEN {array_or_text} IS NULL THEN [] WHEN starts_with(ltrim({array_or_text}), '[') "
                f"THEN json_extract_string({array_or_text}, '$[*]') ELSE [{array_or_text}] END")

    def answers(get, reason_list: str, start: str) -> str:
        listed = f"CASE WHEN len({reason_list}) > 0 THEN {reason_list} ELSE [{get('error_type')}] END"
        messages = get("output_messages")
        text = _NULL if messages == _NULL else _join(f"list_transform(list_filter(json_extract(json_extract({get('output_messages')}, '$[*]')[i], '$.parts[*]'), "
                     "lambda p: json_extract_string(p, '$.type') = 'text'), lambda p: json_extract_string(p, '$.content'))")
        one = _answer({"choice": "i - 1", "kind": "kind", "finish_raw": "r",
                       "finish_hint": f"CASE WHEN len({reason_list}) = 0 AND r IS NOT NULL THEN 'error' END",
                       "text": text if messages == _NULL else f"CASE WHEN {messages} IS NOT NULL THEN {text} END",
                       "model": f"coalesce({get('response_model')}, {get('request_model')})",
                       "max_tokens": get("max_tokens"), "output_tokens": whole_number_sql(get("output_tokens")),
                       "reasoning_tokens": whole_number_sql(get("reasoning_tokens")), "ts": _timestamp(start),
                       "multi_choice": f"len({reason_list}) > 1"})
        return f"list_transform({listed}, lambda r, i: {one})"

    generation = ", ".join(sql_string(op) for op in OTEL_GENERATIONS)
    otlp_reasons = (f"coalesce(nullif(json_extract_string({attribute('finish_reasons')}, "
                    f"'$.value.arrayValue.values[*].stringValue'), []), {reasons(otlp('finish_reasons'))})")
    otlp_answers = answers(otlp, otlp_reasons, "json_extract_string(s, '$.startTimeUnixNano')")
    spans = (f"CASE WHEN {lk.ref('$.resourceSpans')} IS NOT NULL "
             "THEN json_extract(line, '$.resourceSpans[*].scopeSpans[*].spans[*]') ELSE [json(line)] END")
    is_generation = f"{otlp('operation')} IN ({generation}) OR {attribute('finish_reasons')} IS NOT NULL"
    flat_answers = answers(flat, reasons(flat("finish_reasons")), created_expr(lk))
    return (f"CASE WHEN kind = 'otlp' THEN flatten(list_transform(list_filter({spans}, lambda s: {is_generation}), "
            f"lambda s: {otlp_answers})) ELSE {flat_answers} END")


def created_expr(lk: _Lookups) -> str:
    return lk.first(list(LINE_TIMESTAMPS) + ['$."startTimeUnixNano"'])


# A line that holds nothing: empty, a stream's end, an SSE event name.
# (A line that starts with `{` is none of them: the trim, a copy of the line, is skipped.)
BLANK_LINE = ("CASE WHEN starts_with(line, '{') THEN false "
              "ELSE line IS NULL OR trim(line) IN ('', '[DONE]') OR starts_with(line, 'event:') END")


def one_answer(group: frozenset[str]) -> tuple[list[str], str, dict[str, str], str]:
    """For a line whose paths outside `group`'s anchors are all NULL: the paths read (`v`), its shape
    (`kind`, from `v`), each column of its answer as `normalise_sql` types it (from `v` and `kind`),
    and when the line has a list of answers instead (`many`: OTel spans, n > 1 choices)."""
    lk = _Lookups(group)
    fields = _line_fields(lk, {})
    columns = {name: f"CAST({fields.get(name, 'NULL')} AS {kind})" for name, kind in _ANSWER.items() if name != "kind"}
    return lk.paths, fields["kind"], columns, f"kind IN ('otlp', 'otel') OR {fields['multi_choice']}"


def prepared_lines(relation: str) -> str:
    """`relation`'s lines (`line_no`, `line`) with an SSE `data: ` prefix taken off."""
    return ("(SELECT line_no, CASE WHEN starts_with(line, 'data:') THEN ltrim(substr(line, 6)) ELSE line END AS line "
            f"FROM {relation})")


def _branch(group: frozenset[str] | None, overrides: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """The per-line expressions reading only the paths a key group can have (every path: None),
    and, for a custom log (`--field`), the query that marks its answers."""
    lk = _Lookups(group)
    fields = _line_fields(lk, overrides)
    kind = fields.pop("kind")
    custom = None
    if fields.pop("custom_kind", None):  # a custom log: every line with a mapped finish reason or text is one answer
        many = "NULL"
        custom = (f"SELECT * REPLACE (CASE WHEN v IS NOT NULL AND ({fields['finish_raw']} IS NOT NULL OR "
                  f"{fields['text']} IS NOT NULL) THEN 'custom' END AS kind) FROM kinded")
        arrays = {"openai_choices": "NULL", "gemini_candidates": "NULL"}
    else:
        many = (f"CASE WHEN kind IN ('otlp', 'otel') THEN {_otel_list(lk)} WHEN {fields['multi_choice']} THEN "
                f"{_choices_list(fields)} END")
        arrays = {name: fields[name] for name in ("openai_choices", "gemini_candidates")}
    one = _answer({**fields, "kind": "kind"})
    v = (f"json_extract_string(line, [{', '.join(sql_string(p) for p in lk.paths)}])" if lk.paths
         else "CAST([] AS VARCHAR[])")
    return {"v": v, "kind": kind, "many": many, "one": one, **arrays}, custom


def normalise_sql(source: str, vocabulary: TurnVocabulary, overrides: Mapping[str, str] | None = None,
                  groups: Mapping[str, frozenset[str]] | None = None) -> str:
    """The query: from `source` (a relation with `line_no` and `line`, one log line of JSON text
    each) to one row per answer (derived flags computed, `derived_sql`), one row per line that
    holds none (blank, bad, or JSON without a response), and, for a streamed response, one row
    per chunk (kind `openai-chat-stream`, raw fields kept) that `streams_sql` then groups into
    one answer. One pass over the lines; DuckDB SQL only, no Python in the loop.

    With `groups` (`logs.groups.sample_groups`; not with a custom log), a line of one of
    them reads only the paths its group can have; every other line reads them all."""
    overrides = dict(overrides or {})
    full, custom = _branch(None, overrides)
    branches = {g: _branch(anchors, overrides)[0] for g, anchors in ({} if custom else groups or {}).items()}

    def by_group(name: str) -> str:
        if not branches:
            return full[name]
        return ("CASE grp " + " ".join(f"WHEN {sql_string(g)} THEN {b[name]}" for g, b in branches.items())
                + f" ELSE {full[name]} END")

    group = group_sql("line") if branches else "''"
    arrays = ", ".join(f"{by_group(name)} AS {name}" for name in ("openai_choices", "gemini_candidates"))
    answer_columns = ", ".join(f"a.{name} AS {name}" for name in _ANSWER)
    return f"""
WITH grouped AS (
    SELECT line_no, line,
           {BLANK_LINE} AS blank,
           CASE WHEN json_valid(line) THEN {group} END AS grp
    FROM {prepared_lines(source)}
), parsed AS (
    SELECT line_no, line, blank, grp, CASE WHEN grp IS NOT NULL THEN {by_group('v')} END AS v FROM grouped
), kinded AS (
    SELECT *, {by_group('kind')} AS kind FROM parsed
), listed AS (
    SELECT *, {by_group('many')} AS many FROM (SELECT *, {arrays} FROM ({custom or 'SELECT * FROM kinded'}))
), answers AS (
    -- one row per answer; a line with none (blank, bad, JSON without a response, an OTLP line
    -- without a generation span) is one row with no shape
    SELECT line_no, blank, v IS NULL AND NOT blank AS bad,
           unnest(CASE WHEN kind IS NULL THEN [NULL] WHEN len(many) > 0 THEN many WHEN many IS NOT NULL THEN [NULL]
                       ELSE [{by_group('one')}] END) AS a
    FROM listed
), flat AS (
    SELECT line_no, blank, bad, {answer_columns} FROM answers
)
{records_sql('flat', vocabulary)}
"""


def records_sql(relation: str, vocabulary: TurnVocabulary) -> str:
    """`relation`'s answers as the records table keeps them (`derived_sql`): a chunk of a stream keeps
    its raw text until the chunks are grouped (`streams_sql`); an answer keeps only what its problems need."""
    return (f"SELECT * REPLACE (CASE WHEN chunks = 0 THEN text END AS text, "
            "CASE WHEN chunks = 0 THEN reasoning END AS reasoning) "
            f"FROM ({derived_sql(relation, vocabulary)})")


def streams_sql(source: str, vocabulary: TurnVocabulary) -> str:
    """A streamed response's chunk rows (from `normalise_sql`, in `source`) grouped by stream id
    (OpenAI's `id`; Anthropic's message_start `message.id`, carried to the events after it;
    Gemini's `responseId`, a line with a finishReason ending its answer) and choice into one
    answer: the finish reason from the last chunk that has one, the text and the reasoning
    reassembled in line order, the usage from the chunk that carries it."""
    return f"""
WITH resolved AS (
    -- an event without a stream id (Anthropic's, but message_start) belongs to the last one
    -- started before it in the file; events before any start are one stream of their own
    SELECT * REPLACE (coalesce(stream_id, last_value(stream_id IGNORE NULLS) OVER (
               PARTITION BY shape ORDER BY line_no ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW),
               '(before the first message_start)') AS stream_id)
    FROM {source} WHERE chunks = 0
), open_ids AS (
    -- the Gemini ids with a line without a finishReason: only those can be streams
    SELECT DISTINCT stream_id FROM resolved WHERE shape = 'gemini' AND finish_raw IS NULL
), whole AS (
    -- a Gemini line with a finishReason whose id has no other kind of line: a complete response,
    -- an answer as it is (no sorting, no joining of texts)
    SELECT line_no, choice, false AS blank, false AS bad, shape AS kind, finish_raw,
           CASE WHEN upper(finish_raw) = 'STOP' THEN finish_hint END AS finish_hint, text, reasoning, model,
           max_tokens, output_tokens, reasoning_tokens, stop_reason, ts, coalesce(multi_choice, false) AS multi_choice,
           stream_id, 1::BIGINT AS chunks
    FROM resolved r ANTI JOIN open_ids o ON r.stream_id = o.stream_id
    WHERE shape = 'gemini' AND finish_raw IS NOT NULL
), segmented AS (
    -- Gemini lines sharing a responseId are one stream only while every line but the last has
    -- no finishReason (chunks, then the last chunk): a line with one ends its answer, so a
    -- complete response logged again is an answer of its own
    SELECT *, CASE WHEN shape = 'gemini' THEN coalesce(count(finish_raw) OVER (
               PARTITION BY shape, stream_id, choice ORDER BY line_no ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
               0) ELSE 0 END AS answer_no
    FROM resolved WHERE shape <> 'gemini' OR stream_id IN (SELECT stream_id FROM open_ids)
), streams AS (
    SELECT min(line_no) AS line_no, choice, false AS blank, false AS bad,
           CASE WHEN shape = 'gemini' AND count(*) > 1 THEN 'gemini-stream' ELSE shape END AS kind,
           arg_max(finish_raw, line_no) FILTER (finish_raw IS NOT NULL) AS finish_raw,
           -- a Gemini function call, or a chunk's OpenAI tool call, is a tool call only when the answer's
           -- finish is STOP (a call cut by the budget stays `length`)
           CASE WHEN shape NOT IN ('gemini', 'openai-chat-stream') THEN max(finish_hint)
                WHEN upper(arg_max(finish_raw, line_no) FILTER (finish_raw IS NOT NULL)) = 'STOP' THEN max(finish_hint)
                END AS finish_hint,
           string_agg(text, '' ORDER BY line_no) AS text, string_agg(reasoning, '' ORDER BY line_no) AS reasoning,
           any_value(model) AS model, any_value(max_tokens) AS max_tokens, max(output_tokens) AS output_tokens,
           max(reasoning_tokens) AS reasoning_tokens,
           arg_max(stop_reason, line_no) FILTER (stop_reason IS NOT NULL) AS stop_reason, min(ts) AS ts,
           bool_or(multi_choice) OR count(*) OVER (PARTITION BY shape, stream_id, answer_no) > 1 AS multi_choice,
           stream_id, count(*) AS chunks
    FROM segmented GROUP BY shape, stream_id, choice, answer_no
    UNION ALL BY NAME SELECT * FROM whole
)
{records_sql('streams', vocabulary)}
"""
