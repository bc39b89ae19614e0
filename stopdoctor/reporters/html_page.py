"""One self-contained HTML page with Vega-Lite charts: the page shell every `--html` report uses,
the vendored chart library inlined into it (no network at view time), and each chart as a
Vega-Lite spec in a `<script type="application/json">` block, drawn as SVG by vega-embed.

Why Vega-Lite: a declarative spec (plain JSON built here in Python, no JavaScript written per
chart) gives axes, tick labels, legends, tooltips and container-width charts; the three minified
files weigh ~0.8 MB (Plotly.js is 3.5 MB) and render to SVG, which a test can read from the DOM.
Pinned: vega 6.2.0, vega-lite 6.4.1, vega-embed 7.1.0 (npm tarballs, BSD-3-Clause, licences
beside them in `assets/`). Untrusted text only ever reaches the page escaped (`html_text`) or as
JSON data values that Vega draws as SVG text, never as markup or a Vega expression.

Imports: reporters.plain (HTML escaping) and the standard library.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib.resources import files
from typing import Any, Callable

from stopdoctor.reporters.plain import html_isolated, html_text

LIBRARY = ("vega.min.js", "vega-lite.min.js", "vega-embed.min.js")
_SOURCE_MAP = re.compile(r"//# sourceMappingURL=\S*\s*$")

# Draws every chart block; a failure is written on the page (and to the console) so that neither
# a reader nor a test mistakes a missing chart for an empty one.
_DRAW = """
(function () {
  var errors = document.getElementById("chart-errors");
  function fail(message) { errors.hidden = false; errors.textContent += message + "\\n"; }
  window.addEventListener("error", function (e) { fail("error: " + e.message); });
  document.querySelectorAll("script.chart-spec").forEach(function (block) {
    var target = document.getElementById(block.dataset.target);
    vegaEmbed(target, JSON.parse(block.textContent), {renderer: "svg", actions: false})
      .then(function () { target.dataset.drawn = "yes"; })
      .catch(function (e) { fail("chart " + block.dataset.target + ": " + e); });
  });
})();
"""

STYLE = ("body{font-family:system-ui,sans-serif;margin:1.5em 2em;color:#222}h1{margin-top:0}"
         "figure{margin:.5em 0 1.5em}figcaption{font-size:.95em;color:#333;margin-bottom:.3em}"
         ".chart-body{width:100%}.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:0 2em}"
         "table{border-collapse:collapse;width:100%}td,th{padding:.3em .7em;border-bottom:1px solid #ddd;"
         "text-align:left;vertical-align:top}th{background:#f3f3f3}.fix{color:#1b5e20}.num{text-align:right}"
         ".examples{margin:0;padding-left:1.2em;font-size:.9em}.examples code{white-space:pre-wrap;word-break:break-all}"
         ".where{color:#555;font-size:.85em}.error{color:#b71c1c}.warning{color:#e65100}.info{color:#0d47a1}"
         "#chart-errors{color:#b71c1c;white-space:pre-wrap;border:1px solid #b71c1c;padding:.5em}")


@cache
def _library() -> str:
    assets = files("stopdoctor.reporters") / "assets"
    # The source-map comment would make a browser with devtools open ask the network for a file.
    return "\n".join(_SOURCE_MAP.sub("", (assets / name).read_text(encoding="utf-8")) for name in LIBRARY)


def script_json(value: Any) -> str:
    """JSON that is safe inside a `<script>` block: no `<`, `>` or `&` (so no `</script>`, no
    `<!--`), and no line separators, whatever the untrusted strings in it hold."""
    text = json.dumps(value, ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def count_ticks(top: int) -> list[int]:
    """Whole-number ticks from 0 to at least `top`, at most 6 (a count axis never reads 0.5)."""
    step = next(m * 10 ** k for k in range(20) for m in (1, 2, 5) if top / (m * 10 ** k) <= 5)
    return list(range(0, top + step, step)) if top else [0, 1]


def chart(chart_id: str, kind: str, caption: str, spec: dict[str, Any]) -> str:
    """A figure whose body vega-embed fills with the spec's SVG; `caption` is escaped here.
    The spec takes the container's width (charts use the page, not a fixed 640 px)."""
    spec = {"$schema": "https://vega.github.io/schema/vega-lite/v6.json", "width": "container",
            "autosize": {"type": "fit-x", "contains": "padding"}, **spec}
    return (f'<div class="chart {kind}" data-chart="{chart_id}"><figure><figcaption>{html_text(caption)}</figcaption>'
            f'<div class="chart-body" id="{chart_id}"></div></figure>'
            f'<script type="application/json" class="chart-spec" data-target="{chart_id}">{script_json(spec)}</script></div>')


def findings_table(findings: Any, more: Callable[[Any], str] | None = None, more_title: str = "",
                   heading: bool = True, inline_where: bool = True) -> str:
    """Each finding with its severity, rule, message, `fix:` and where it was found; `more` adds a
    column (the logs page's example answers, the check page's file:line)."""
    def where(f: Any) -> str:
        loc = f.location
        if loc is None:
            return ""
        text = loc.file + (f":{loc.line}" if loc.line else "") + (f" ({loc.key})" if loc.key and not loc.line else "")
        return f'<div class="where">{html_isolated(text)}</div>'

    rows = "".join(
        f'<tr class="finding"><td class="{f.severity.label}">{f.severity.label}</td>'
        f"<td>{html_text(f.code)}<br>{html_text(f.name)}</td><td>{html_isolated(f.message)}"
        f'<div class="fix">fix: {html_isolated(f.fix)}</div>{where(f) if inline_where else ""}</td>' + (f"<td>{more(f)}</td>" if more else "") + "</tr>"
        for f in findings)
    extra = f"<th>{html_text(more_title)}</th>" if more else ""
    return ("<h2>Findings</h2>" if heading else "") + (f"<table><tr><th>severity</th><th>rule</th><th>finding and fix</th>{extra}</tr>{rows}</table>"
                                   if rows else "<p>none</p>")


def page(title: str, body: str) -> str:
    """The whole document: the body, then the inlined library and the drawing script."""
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html_text(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}</style></head>'
            f'<body>{body}<pre id="chart-errors" hidden></pre>'
            f"<script>{_library()}</script><script>{_DRAW}</script></body></html>\n")
