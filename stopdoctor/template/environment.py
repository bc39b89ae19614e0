"""The sandboxed Jinja environment chat templates render in: transformers' own, metered.

It copies transformers' (`transformers/utils/chat_template_utils.py`, `_cached_compile_jinja_template`
and `render_jinja_template`, transformers 5.x): an `ImmutableSandboxedEnvironment` with
`trim_blocks`, `lstrip_blocks`, `loopcontrols`, the `{% generation %}` tag, `raise_exception`,
`strftime_now`, `tojson` (ensure_ascii=False), a restricted `dict` and `namespace`. On top of it
every operation a template can repeat is routed through the limit hooks of `template.limits`: the
compiled code meters loops, `~`, calls, attribute/item access, operators, filters and block buffers.

`sandbox_environment()` is the one shared environment; `recording` collects the character spans
of `{% generation %}` blocks while a render runs.

Imports: jinja2 and the standard library, `stopdoctor.template.limits`.
"""

from __future__ import annotations

import functools
import json
import types
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any

import jinja2
import jinja2.exceptions
import jinja2.ext
import jinja2.filters
import jinja2.nodes
import jinja2.sandbox
import jinja2.utils
import markupsafe
from jinja2.compiler import CodeGenerator, Frame
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from stopdoctor.template.limits import (LimitExceeded, check_format_spec, check_format_string, check_strftime, check_text,
                                        current_budget, predict_binop, predict_call, predict_filter)


class TemplateRaised(jinja2.exceptions.TemplateError):
    """What the template's `raise_exception(message)` raises (the renderer reports it as
    TemplateRaisedError). A jinja TemplateError, as in transformers, with the
    template's message verbatim as its only argument."""


def _lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:  # jinja's names
    """jinja's `lipsum`, refused before it runs when it could write more than the output limit
    (it is one Python call, which the time limit cannot interrupt)."""
    budget = current_budget()
    if isinstance(n, int) and isinstance(max, int) and isinstance(min, int):
        words = max if max > min else min
        budget.check_int(n * (abs(words) * 12 + 10), "lipsum of size")
    return jinja2.utils.generate_lorem_ipsum(n=n, html=html, min=min, max=max)


def _raise_exception(message: Any) -> None:
    # transformers: `raise jinja2.exceptions.TemplateError(message)`
    raise TemplateRaised(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # Same signature and defaults as transformers' override of jinja's tojson: no HTML escaping,
    # non-ASCII kept, indent/separators/sort_keys exposed. Equal to json.dumps, but built chunk by
    # chunk so that an indent repeated on every nested line stops at the output limit, not at GBs.
    if indent is None:
        return json.dumps(x, ensure_ascii=ensure_ascii, separators=separators, sort_keys=sort_keys)
    budget = current_budget()
    if isinstance(indent, int) and not isinstance(indent, bool):
        budget.check_int(indent, "tojson indent")
    elif isinstance(indent, str):
        budget.check_int(len(indent), "tojson indent of size")
    encoder = json.JSONEncoder(ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    chunks = []
    total = 0
    for chunk in encoder.iterencode(x):
        total += len(chunk)
        if total > budget.max_value:
            raise LimitExceeded(f"tojson built more than {budget.max_value} characters")
        chunks.append(chunk)
    return "".join(chunks)


def _strftime_now(format: str) -> str:  # `format`: the template calls it positionally
    check_strftime(format, current_budget())
    return datetime.now().strftime(format)


@jinja2.pass_environment
def _sum(environment: Any, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
    """jinja's `sum`, one addition at a time under the budget: Python's sum() of lists or strings
    is one call that copies the growing total each step (quadratic), which no deadline interrupts."""
    if attribute is not None:
        iterable = map(jinja2.filters.make_attrgetter(environment, attribute), iterable)
    budget = current_budget()
    total = start
    for item in iterable:
        budget.tick()
        predict_binop("+", total, item, budget)
        total = budget.produced(total + item)
    return total


class _MeteredFormatting:
    """str.format and format_map in the sandbox: each field's spec is checked once resolved (a
    nested `{0:{1}}` width is known only then) and the fields' text is counted as it is built."""

    def format_field(self, value: Any, format_spec: str) -> Any:
        budget = current_budget()
        budget.tick()
        check_format_spec(format_spec, budget)
        check_text(value, budget, "a formatted field's text")
        text = super().format_field(value, format_spec)  # type: ignore[misc]
        self.built = getattr(self, "built", 0) + len(text)
        if self.built > budget.max_value:
            raise LimitExceeded(f"a formatted string would be over {budget.max_value} characters")
        return text


class _MeteredFormatter(_MeteredFormatting, jinja2.sandbox.SandboxedFormatter):
    pass


class _MeteredEscapeFormatter(_MeteredFormatting, jinja2.sandbox.SandboxedEscapeFormatter):
    pass


class _TemplateDict:
    """transformers' `TemplateDict`: `dict(...)` without exposing the dict type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """transformers' `TemplateNamespace`: no underscore-prefixed attributes."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # no `self`: same trick as jinja's Namespace
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                "Chat templates cannot store underscore-prefixed attributes on a namespace, "
                f"but got {name!r}. Please rename the attribute."
            )


class GenerationRecorder:
    """Collects the character spans `{% generation %}` blocks write, as transformers'
    AssistantTracker does for `return_assistant_tokens_mask`: a block's start is the length of
    everything the top-level template yielded before it (so, as there, a block inside a macro
    or a `{% set %}` block is placed where that block's output is yielded, not where it lands)."""

    __slots__ = ("offset", "spans")

    def __init__(self) -> None:
        self.offset = 0  # characters yielded so far; kept current by CompiledTemplate.render
        self.spans: list[tuple[int, int]] = []


_RECORDER: ContextVar[GenerationRecorder | None] = ContextVar("stopdoctor_generation_recorder", default=None)


@contextmanager
def recording(recorder: GenerationRecorder | None) -> Iterator[None]:
    """Let `{% generation %}` blocks rendered inside the block report their spans to `recorder`
    (None: record nothing)."""
    token = _RECORDER.set(recorder)
    try:
        yield
    finally:
        _RECORDER.reset(token)


class _GenerationExtension(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: renders its body unchanged, as transformers'
    AssistantTracker does; records the body's character span when a render asks for it."""

    tags = {"generation"}  # noqa: RUF012 - jinja's Extension declares it so; never mutated

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(
            self.call_method("_generation_support"), [], [], body
        ).set_lineno(lineno)

    def _generation_support(self, caller: Any) -> str:
        body = caller()
        recorder = _RECORDER.get()
        if recorder is not None:
            recorder.spans.append((recorder.offset, recorder.offset + len(body)))
        return body


class _LimitsExtension(jinja2.ext.Extension):
    """Holds the runtime guards the instrumented AST calls: one per loop, one per `~`."""

    def _guard_iter(self, iterable: Any) -> Iterator[Any]:
        budget = current_budget()
        for item in iterable:
            budget.tick()
            yield item

    def _guard_value(self, value: Any) -> Any:
        return current_budget().produced(value)

    def _guard_text(self, value: Any) -> Any:
        """An operand of `~` is made text with str(): check how long that would be first."""
        check_text(value, current_budget(), "a `~` operand's text")
        return value


class _Instrument(NodeTransformer):
    """Route every loop's iterable and every `~` concatenation through the limit guards."""

    def __init__(self, ext: _LimitsExtension) -> None:
        self.ext = ext

    def visit_For(self, node: jinja2.nodes.For) -> jinja2.nodes.Node:
        self.generic_visit(node)
        node.iter = self.ext.call_method("_guard_iter", [node.iter], lineno=node.iter.lineno)  # type: ignore[list-item]  # an Expr, typed Node
        return node

    def visit_Concat(self, node: jinja2.nodes.Concat) -> jinja2.nodes.Node:
        self.generic_visit(node)
        node.nodes = [self.ext.call_method("_guard_text", [operand], lineno=operand.lineno) for operand in node.nodes]
        return self.ext.call_method("_guard_value", [node], lineno=node.lineno)


# Extensions whose methods the compiled template calls directly (see _GuardedCodeGenerator).
_DIRECT_EXTENSIONS = frozenset({_LimitsExtension.identifier, _GenerationExtension.identifier})


class _GuardedBuffer(list):
    """Output buffer of macros, call blocks and `{% set %}` blocks: each append is checked."""

    __slots__ = ("_budget", "_chars")

    def __init__(self) -> None:
        super().__init__()
        self._budget = current_budget()
        self._chars = 0

    def _account(self, text: Any) -> None:
        budget = self._budget
        budget.tick()
        self._chars += len(text)
        if self._chars > budget.max_value:
            raise LimitExceeded(
                f"a block built more than {budget.max_value} characters of output"
            )
        budget.work_left -= len(text)
        if budget.work_left < 0:
            raise LimitExceeded(
                f"it built more than {budget.limits.max_work_chars} characters of intermediate strings"
            )

    def append(self, text: Any) -> None:
        self._account(text)
        super().append(text)

    def extend(self, texts: Iterable[Any]) -> None:
        for text in texts:
            self.append(text)


class _GuardedCodeGenerator(CodeGenerator):
    def buffer(self, frame: Frame) -> None:
        frame.buffer = self.temporary_identifier()
        self.writeline(f"{frame.buffer} = environment.stopdoctor_buffer()")

    def visit_Call(self, node: jinja2.nodes.Call, frame: Frame, forward_caller: bool = False) -> None:
        # Our own guards and the generation tag are trusted code: called directly, not through the
        # sandbox's (metered) environment.call. Their arguments are still compiled by the sandbox.
        target = node.node
        if isinstance(target, jinja2.nodes.ExtensionAttribute) and target.identifier in _DIRECT_EXTENSIONS:
            self.visit(target, frame)
            self.write("(")
            if forward_caller:
                self.write("caller")
            else:
                self.visit(node.args[0], frame)
            self.write(")")
            return
        super().visit_Call(node, frame, forward_caller=forward_caller)


# Filters whose parameters are widths or counts: `'x'|center(10**9)` allocates before it returns.
_WIDTH_FILTERS = frozenset({"center", "indent", "wordwrap", "batch", "slice", "tojson", "truncate"})


def _guard_filter(name: str, func: Any) -> Any:
    offset = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0

    @functools.wraps(func)  # keeps `jinja_pass_arg`, so jinja still injects context/env
    def guarded(*args: Any, **kwargs: Any) -> Any:
        budget = current_budget()
        budget.tick()
        if name in _WIDTH_FILTERS:
            for value in (*args[offset + 1:], *kwargs.values()):
                budget.check_int(value, f"{name} parameter")
        predict_filter(name, args[offset:], kwargs, budget)
        return budget.produced(func(*args, **kwargs))

    return guarded


def _finalize(value: Any) -> Any:
    """Every `{{ value }}` passes here before str(): a list of long strings must not be printed whole."""
    check_text(value, current_budget(), "an output value's text")
    return value


class _SandboxEnvironment(ImmutableSandboxedEnvironment):
    """transformers' ImmutableSandboxedEnvironment, with every operation metered."""

    code_generator_class = _GuardedCodeGenerator
    # Intercepting the arithmetic operators routes them through call_binop (and stops jinja from
    # constant-folding `10**10**10` at compile time, which would hang before any limit applies).
    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})

    def __init__(self) -> None:
        super().__init__(
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[_GenerationExtension, jinja2.ext.loopcontrols, _LimitsExtension],
            finalize=_finalize,
        )
        self.filters["tojson"] = _tojson
        self.filters["sum"] = _sum
        self.filters = {name: _guard_filter(name, f) for name, f in self.filters.items()}
        self.globals["lipsum"] = _lipsum
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = _strftime_now
        self.globals["dict"] = _TemplateDict()
        self.globals["namespace"] = _TemplateNamespace
        self._limits_ext: _LimitsExtension = self.extensions[_LimitsExtension.identifier]  # type: ignore[assignment]  # registered above

    def wrap_str_format(self, value: Any) -> Any:
        """jinja's wrapper of `str.format`/`format_map` (reached on attribute access), with the
        metered formatter in place of its SandboxedFormatter."""
        if not isinstance(value, (types.MethodType, types.BuiltinMethodType)) or value.__name__ not in (
                "format", "format_map") or not isinstance(value.__self__, str):
            return None
        text = value.__self__
        is_format_map = value.__name__ == "format_map"
        if isinstance(text, markupsafe.Markup):
            formatter: Any = _MeteredEscapeFormatter(self, escape=text.escape)
        else:
            formatter = _MeteredFormatter(self)

        def wrapper(*args: Any, **kwargs: Any) -> str:
            if is_format_map:
                if kwargs:
                    raise TypeError("format_map() takes no keyword arguments")
                if len(args) != 1:
                    raise TypeError(f"format_map() takes exactly one argument ({len(args)} given)")
                kwargs, args = args[0], ()
            return type(text)(formatter.vformat(text, args, kwargs))

        return functools.update_wrapper(wrapper, value)

    @staticmethod
    def stopdoctor_buffer() -> _GuardedBuffer:
        return _GuardedBuffer()

    def _parse(self, source: str, name: str | None, filename: str | None) -> jinja2.nodes.Template:
        tree = super()._parse(source, name, filename)
        return _Instrument(self._limits_ext).visit(tree)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        budget = current_budget()
        budget.tick()
        if operator == "+" and type(left) is str and type(right) is str:  # the common case, sized inline
            size = len(left) + len(right)
            budget.check_int(size, "a joined value of size")
            budget.work_left -= size
            if budget.work_left < 0:
                raise LimitExceeded(
                    f"it built more than {budget.limits.max_work_chars} characters of intermediate strings")
            return left + right
        predict_binop(operator, left, right, budget)
        return budget.produced(super().call_binop(context, operator, left, right))

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        budget = current_budget()
        budget.tick()
        target = getattr(obj, "__wrapped__", obj)  # the sandbox wraps str.format
        if isinstance(getattr(target, "__self__", None), (str, list, tuple, dict)):
            # Built-in methods such as ljust/center/zfill/expandtabs take widths.
            for value in (*args, *kwargs.values()):
                budget.check_int(value, "method argument")
            name = getattr(target, "__name__", "")
            if name in ("format", "format_map"):
                check_format_string(target.__self__, budget, brace=True)
            predict_call(name, target, args, kwargs, budget)
        return budget.produced(super().call(context, obj, *args, **kwargs))

    def getitem(self, obj: Any, argument: Any) -> Any:
        if type(obj) is dict and type(argument) is str:  # message['content']: no work to meter
            try:
                return obj[argument]
            except KeyError:
                pass
        budget = current_budget()
        budget.tick()
        value = super().getitem(obj, argument)
        if isinstance(argument, slice):
            budget.produced(value)
        return value

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict and not hasattr(dict, attribute):  # message.content: an item, as jinja finds it
            try:
                return obj[attribute]
            except KeyError:
                pass
        current_budget().tick()
        return super().getattr(obj, attribute)


_ENVIRONMENT: _SandboxEnvironment | None = None


def sandbox_environment() -> _SandboxEnvironment:
    """The sandboxed environment, built once (its globals and filters never change after)."""
    global _ENVIRONMENT
    if _ENVIRONMENT is None:
        _ENVIRONMENT = _SandboxEnvironment()
    return _ENVIRONMENT

