"""The CLI's consoles never pass a control sequence through from the text they print.

A task's instruction and task.toml, a solution's and a verifier's output, a build log, a
model's reply: all are someone else's text, and a terminal acts on the escapes in them (an
OSC 52 clipboard write, a window title, a hyperlink, the cursor). Every str and rich Text that
reaches `out` or `err` (cli.common) has its control characters shown as escapes by
obsspec.types.visible_controls, in this one place, instead of at each print.

Task text that our code makes into a rich Text (a table cell, Text.assemble) is made visible
before: Text drops BEL and CR when it is made, and a table measures its cells before they
render. The console still makes any Text visible as it renders: nothing gets past it.

rich's own styling is untouched: it is added after rendering, and its cursor moves (Live) are
Control segments, which pass as they are. Markup is another matter: task text is printed as
Text or with markup=False (or rich.markup.escape), never parsed as markup. `env run` writes
the command's output to the file as is, and `--json` goes to stdout through json.dumps,
whose \\u escapes keep control characters off the terminal.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from obsspec.types import visible_controls


class TerminalConsole(Console):
    def render_str(self, text: str, **kwargs) -> Text:
        # Before rich's Text, which silently drops BEL and CR but keeps ESC.
        return super().render_str(visible_controls(text), **kwargs)

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        """rich Text made from task text (a table cell, Text.assemble) is not a str: its
        segments are made visible here."""
        for segment in super().render(renderable, options):
            if segment.control or not segment.text:
                yield segment
            else:
                yield segment._replace(text=visible_controls(segment.text))
