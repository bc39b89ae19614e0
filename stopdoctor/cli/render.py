"""`stopdoctor render`: the fully templated prompt exactly as transformers builds it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from stopdoctor.cli.app import (ColorOpt, JsonOpt, MessageOpt, MessagePairCommand, ModelArg, OutputOpt, PlainFormatOpt,
                                RevisionOpt, app, chosen_format, handles_errors, message_pairs)
from stopdoctor.cli.output import say, working, write_report

MessagesOpt = Annotated[Path | None, typer.Option(
    "--messages", help="JSON list of messages, or JSONL with one conversation a line.", show_default=False)]
ToolsOpt = Annotated[Path | None, typer.Option("--tools", help="JSON list of tool schemas.", show_default=False)]
TemplateOpt = Annotated[str | None, typer.Option(
    "--template", help="Render with another template: a file, or a named template of the model (e.g. tool_use).",
    show_default=False)]
CompareOpt = Annotated[str | None, typer.Option(
    "--compare", help="A template file or a second model (folder, hub id, .gguf): render the same messages "
    "with it and show the differences.", show_default=False)]


@app.command(cls=MessagePairCommand)
@handles_errors
def render(
    model: ModelArg,
    messages_file: MessagesOpt = None,
    message: MessageOpt = None,
    tools_file: ToolsOpt = None,
    no_generation_prompt: Annotated[bool, typer.Option("--no-generation-prompt", help="Do not open an assistant turn at the end.")] = False,
    continue_final_message: Annotated[bool, typer.Option("--continue-final-message", help="Leave the final message open for the model to continue.")] = False,
    template: TemplateOpt = None,
    compare: CompareOpt = None,
    ids: Annotated[bool, typer.Option("--ids", help="Add the token table (index, id, token, special).")] = False,
    thinking: Annotated[str | None, typer.Option("--thinking", metavar="on|off|both", help="A reasoning model: render with thinking on, off, or both (as generate --thinking); default: the template's default.")] = None,
    revision: RevisionOpt = None,
    json: JsonOpt = False,
    color: ColorOpt = None,
    format: PlainFormatOpt = None,
    output: OutputOpt = None,
) -> int:
    """Show the prompt the runtime builds (special tokens and newlines visible), its token ids, or a template diff."""
    from stopdoctor.api import read_conversations, read_tools, render_prompts, render_report
    from stopdoctor.core.errors import InputError

    format = chosen_format(format, json, "render")
    if messages_file is not None and message:
        raise InputError("give --messages or -m, not both")
    if messages_file is not None:
        conversations = read_conversations(messages_file)
    elif message:
        conversations = [[{"role": role, "content": text} for role, text in message_pairs(message)]]
    else:
        conversations = None
    tools = read_tools(tools_file) if tools_file is not None else None

    with working(f"reading {model} and rendering…"):
        result = render_prompts(model, conversations, tools=tools, template=template, compare=compare,
                                add_generation_prompt=not no_generation_prompt,
                                continue_final_message=continue_final_message, revision=revision, thinking=thinking,
                                typed=bool(message))
    for note in result.notes:
        say(f"stopdoctor: {note}")
    report = render_report(model, result)
    write_report(report, format, output, color, ids=ids)
    return report.exit_code()
