"""What a chat template writes after assistant content, read from its syntax tree without
rendering: the fallback for templates that render no plain conversation (firefunction-v1 raises
unless a `functions` message follows the system one; a template may call a filter transformers'
Jinja lacks). The tree is parsed, never compiled or run, so nothing in it executes.

The reading: in the branch a template writes for the assistant role (a test comparing a role to
"assistant"), or in output written for every message, the literal text (or `*_token` variable)
that follows the message's content. Several candidates must agree on a closing token, or share
one (`A + Z` for answers, `B + Z` for tool calls: `Z`), else there is no answer.

Imports: the standard library, jinja2, `stopdoctor.template` (environment, limits, pieces, render).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence

import jinja2
from jinja2 import nodes

from stopdoctor.core.records import record
from stopdoctor.template.environment import sandbox_environment
from stopdoctor.template.limits import RenderLimits
from stopdoctor.template.pieces import split_pieces
from stopdoctor.template.render import check_template_size

# Role names a template compares against for the assistant's own turn, and for everyone else's.
_ASSISTANT_ROLES = frozenset({"assistant", "model", "bot", "chatbot", "gpt"})
_OTHER_ROLES = frozenset({"user", "system", "tool", "tools", "function", "functions", "ipython", "observation",
                          "human", "developer", "user_context", "documents"})
# Methods and filters that keep a content value a content value (`message['content'].strip()`, `|trim`).
_KEEPS_CONTENT = frozenset({"strip", "lstrip", "rstrip", "trim", "string", "safe", "e", "escape"})
_MAX_NODES = 50_000  # a syntax tree past this is no plausible chat template: no answer

_CONTENT, _OTHER = object(), object()
# A variable holding the message's content (`content`, `message_content`), never its reasoning
# (`reasoning_content`) or a system/tool text.
_CONTENT_NAME = re.compile(r"(?:(?:message|msg|final|answer|text|last)_?)?content")  # atoms of a flattened output: content, anything unknown


@record
class StaticClose:
    """The close read from a template's source: the marker that ends assistant turns, the whole
    literal text that follows the content, and whether it is written only under a condition."""

    marker: str
    close: str
    conditional: bool  # written inside an `{% if %}` after the content (e.g. only when a turn follows)
    evidence: str


def read_close(source: str, special_tokens: Mapping[str, str] | None, known: Iterable[str], reason: str,
               limits: RenderLimits = RenderLimits()) -> StaticClose | None:
    """The close a template writes after assistant content, from its syntax tree; None when the
    tree gives no single answer. `reason` says why rendering could not answer (for the evidence)."""
    check_template_size(source, limits)
    try:
        return _read(source, special_tokens, known, reason)
    except (jinja2.TemplateSyntaxError, RecursionError):  # unparsable, or nested past Python's stack: no answer
        return None


def _read(source: str, special_tokens: Mapping[str, str] | None, known: Iterable[str], reason: str) -> StaticClose | None:
    tree = sandbox_environment().parse(source)
    if sum(1 for _ in tree.find_all(nodes.Node)) > _MAX_NODES:
        return None
    # A template may name its own special tokens (`{%- set eos_token = "<seed:eos>" %}`): those win.
    # One it builds (`'<｜hy_eos{}｜>'.format(HYTK)`) is unknown here: never the caller's value.
    assigned = [(a.target.name, a.node) for a in tree.find_all(nodes.Assign) if isinstance(a.target, nodes.Name) and a.target.name.endswith("_token")]
    own = {name: node.value for name, node in assigned if isinstance(node, nodes.Const) and isinstance(node.value, str)}
    built = {name for name, _ in assigned} - set(own)
    special_tokens = {k: v for k, v in {**(special_tokens or {}), **own}.items() if k not in built}
    reader = _Reader(special_tokens)
    reader.body(tree.body, "any")
    candidates = reader.assistant or reader.any
    return _decide(candidates, sorted(set(known) | {str(v) for v in special_tokens.values() if v}, key=len, reverse=True),
                   reason)


@record
class _Candidate:
    text: str  # literal text written right after content
    conditional: bool


class _Reader:
    """Walks statement lists, tracking whether the current branch is the assistant's."""

    def __init__(self, special_tokens: Mapping[str, str]):
        self.special_tokens = special_tokens
        self.assistant: list[_Candidate] = []
        self.any: list[_Candidate] = []

    def body(self, statements: list[nodes.Node], role: str, after: Sequence[nodes.Node] = ()) -> None:
        """Walk `statements` in the branch `role`; `after` is what the template writes once they
        are done (the statements after the enclosing `{% if %}`), so `{{ content }}{% endif %}{{ eos_token }}` reads."""
        for i, node in enumerate(statements):
            rest = [*statements[i + 1:], *after]
            if isinstance(node, nodes.Output):
                self._sequence(self.atoms(node), rest, role)
            elif isinstance(node, nodes.Assign):
                self._sequence(self.atoms(node.node), [], role)
            elif isinstance(node, nodes.If):
                self._branch(node, role, rest)
            elif isinstance(node, nodes.For):  # after a loop's body comes its next iteration: no continuation
                self.body(node.body, role)
                self.body(node.else_, role, rest)
            elif isinstance(node, (nodes.With, nodes.FilterBlock, nodes.Scope, nodes.ScopedEvalContextModifier)):
                self.body(node.body, role, rest)
            # A macro's body is written wherever it is called, for whichever role: not read.

    def _branch(self, node: nodes.If, role: str, after: list[nodes.Node]) -> None:
        """An `{% if %}…{% elif %}…{% else %}` chain: each body in the role its test and the
        earlier tests leave (after `== 'assistant'` the rest of the chain is someone else's)."""
        rest, else_role = role, None
        for test, body in ((node.test, node.body), *((e.test, e.body) for e in node.elif_)):
            if rest == "other":
                return
            tested, positive = _role_test(test)
            polarity = _tool_call_polarity(test)
            if polarity == "with":
                # a tool-call turn writes content, then the call's opener: not read; its else is the answer
                self.body(body, "other", after)
                continue
            if polarity == "without" and isinstance(test, nodes.Not) and not node.elif_:
                else_role = "other"  # `{% if not message.tool_calls %}` answer `{% else %}` tool call
            if tested is None:
                inside = rest
            elif (tested == "assistant") == positive:  # `== 'assistant'`, or `!= 'user'`-like negations of others
                inside = "assistant" if tested == "assistant" else rest
            else:
                inside = "other"
            self.body(body, inside, after)
            if isinstance(test, nodes.And):  # `role == 'assistant' and loop.last`: later branches may be the assistant's too
                continue
            if tested == "assistant":
                rest = "other" if positive else "assistant"
            elif tested == "other" and not positive:
                rest = "other"
        if (else_role or rest) != "other":
            self.body(node.else_, rest, after)

    def _sequence(self, atoms: list, following: list[nodes.Node], role: str) -> None:
        if role == "other" or _CONTENT not in atoms:
            return
        at = len(atoms) - 1 - atoms[::-1].index(_CONTENT)
        text, conditional = _text_of(atoms[at + 1:]), False
        if not text.strip() and not any(a is _OTHER for a in atoms[at + 1:]):
            text, conditional = self._next_statement(following, text)
        if text.strip():
            (self.assistant if role == "assistant" else self.any).append(_Candidate(text, conditional))

    def _next_statement(self, following: list[nodes.Node], text: str) -> tuple[str, bool]:
        """The text written right after an output that ends with the content: the next output,
        or the first output of a following `{% if %}` (conditional)."""
        for node in following[:1]:
            if isinstance(node, nodes.Output):
                return text + _text_of(self.atoms(node)), False
            if isinstance(node, nodes.If) and _is_position_test(node.test):
                first = next((n for n in node.body if isinstance(n, nodes.Output)), None)
                if first is not None:
                    return text + _text_of(self.atoms(first)), True
        return text, False

    def atoms(self, node: nodes.Node | None) -> list:
        """A flat list of what an expression writes, in order: strings, content, or unknown."""
        if isinstance(node, nodes.Output):
            return [a for child in node.nodes for a in self.atoms(child)]
        if isinstance(node, nodes.TemplateData):
            return [node.data]
        if isinstance(node, nodes.Const):
            return [node.value] if isinstance(node.value, str) else [_OTHER]
        if isinstance(node, nodes.Add | nodes.Concat):
            parts = [node.left, node.right] if isinstance(node, nodes.Add) else node.nodes
            return [a for part in parts for a in self.atoms(part)]
        if isinstance(node, nodes.Name):
            if node.name in self.special_tokens and node.name.endswith("_token"):
                return [str(self.special_tokens[node.name])]
            return [_CONTENT] if _CONTENT_NAME.fullmatch(node.name.lower()) else [_OTHER]
        if _is_content(node):
            return [_CONTENT]
        if isinstance(node, nodes.Filter) and node.node is not None and node.name in _KEEPS_CONTENT:
            return [_CONTENT] if self.atoms(node.node) == [_CONTENT] else [_OTHER]
        if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr) and node.node.attr in _KEEPS_CONTENT:
            return [_CONTENT] if self.atoms(node.node.node) == [_CONTENT] else [_OTHER]
        if isinstance(node, nodes.CondExpr):
            return self.atoms(node.expr1) if _CONTENT in self.atoms(node.expr1) else [_OTHER]
        return [_OTHER]


def _is_content(node: nodes.Node | None) -> bool:
    """`message['content']`, `message.content`, `ns.content`."""
    if isinstance(node, nodes.Getitem):
        return isinstance(node.arg, nodes.Const) and node.arg.value == "content"
    if isinstance(node, nodes.Getattr | nodes.NSRef):
        return node.attr == "content"
    return False


_TOOL_CALL_NAMES = frozenset({"tool_calls", "function_call", "tool_call", "functions"})


def _tool_call_polarity(test: nodes.Node, negated: bool = False) -> str | None:
    """"with" when a test requires the message's tool calls (`message.tool_calls`,
    `message.get('tool_calls')`, `role == 'assistant' and message.tool_calls`), "without" when it
    names them only negated (`not message.tool_calls`), None when it does not name them."""
    if isinstance(test, nodes.Not):
        return _tool_call_polarity(test.node, not negated)
    if isinstance(test, nodes.And | nodes.Or):
        sides = {_tool_call_polarity(test.left, negated), _tool_call_polarity(test.right, negated)} - {None}
        return "with" if "with" in sides else sides.pop() if sides else None
    names = {n.attr for n in (test, *test.find_all(nodes.Getattr)) if isinstance(n, nodes.Getattr)}
    names |= {n.value for n in (test, *test.find_all(nodes.Const)) if isinstance(n, nodes.Const) and isinstance(n.value, str)}
    if not names & _TOOL_CALL_NAMES:
        return None
    return "without" if negated else "with"


def _is_position_test(test: nodes.Node) -> bool:
    """A test on the message's position (`not loop.last`, `loop.index0 < messages|length - 1`):
    a close written only when another turn follows. A test on the message itself (its tool calls,
    its reasoning) opens something else inside the turn."""
    every = (test, *test.find_all(nodes.Node))  # the test itself too: `{% if loop.last %}`
    on_loop = any(isinstance(n, nodes.Getattr) and isinstance(n.node, nodes.Name) and n.node.name == "loop" for n in every)
    on_length = any(isinstance(n, nodes.Filter) and n.name == "length" for n in every)
    on_message = any(isinstance(n, nodes.Getattr | nodes.Getitem) and not (isinstance(n.node, nodes.Name) and n.node.name == "loop")
                     for n in every)
    return (on_loop or on_length) and not on_message


def _text_of(atoms: list) -> str:
    """The literal text at the start of `atoms`, up to the first unknown value or content."""
    text = []
    for atom in atoms:
        if not isinstance(atom, str):
            break
        text.append(atom)
    return "".join(text)


def _role_test(test: nodes.Node) -> tuple[str | None, bool]:
    """("assistant" | "other" | None, positive) for a test comparing something to role names:
    `message['role'] == 'assistant'` → ("assistant", True); `role != 'user'` → ("other", False)."""
    if isinstance(test, nodes.Not):
        tested, positive = _role_test(test.node)
        return tested, not positive
    if isinstance(test, nodes.And):
        for side in (test.left, test.right):
            tested, positive = _role_test(side)
            if tested is not None and positive:
                return tested, True
        return None, True
    if not isinstance(test, nodes.Compare) or len(test.ops) != 1:
        return None, True
    op = test.ops[0]
    names = _const_strings(op.expr) or _const_strings(test.expr)
    if not names or op.op not in ("eq", "ne", "in", "notin"):
        return None, True
    lowered = {n.lower() for n in names}
    if lowered & _ASSISTANT_ROLES and not lowered & _OTHER_ROLES:
        tested = "assistant"
    elif lowered <= _OTHER_ROLES:
        tested = "other"
    else:
        return None, True
    return tested, op.op in ("eq", "in")


def _const_strings(node: nodes.Node) -> list[str]:
    if isinstance(node, nodes.Const) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, nodes.List | nodes.Tuple):
        values = [item.value for item in node.items if isinstance(item, nodes.Const) and isinstance(item.value, str)]
        return values if len(values) == len(node.items) else []
    return []


def _decide(candidates: list[_Candidate], known: list[str], reason: str) -> StaticClose | None:
    """One marker every candidate agrees on: the last special token they all write (`A + Z`, `B + Z`
    → `Z`); none when they share none."""
    if not candidates:
        return None
    specials = [[p for p in split_pieces(c.text, known) if p in known and p.strip()] for c in candidates]
    shared = [p for p in specials[0] if all(p in s for s in specials[1:])]
    if not shared:  # plain text after the content (a newline before the next header) is no close to stop on
        return None
    marker = shared[-1]
    close = candidates[0].text
    conditional = all(c.conditional for c in candidates)
    evidence = (f"read from the template's source, not rendered ({reason}): after assistant content it writes "
                f"{json.dumps(close, ensure_ascii=False)}")
    return StaticClose(marker, close, conditional, evidence)
