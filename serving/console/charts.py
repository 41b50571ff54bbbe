"""Charts drawn on the server as SVG: stacked bars, one per category (a planning run, an hour), one colour per
series. Written here rather than by a charting library: the console's Content-Security-Policy allows no inline
style, and the SVG of the usual libraries carries style attributes or scripts; here colours come from classes in
the console's stylesheet. Every chart's numbers are also rendered as a table beside it (templates/console/macros)."""

import math
from dataclasses import dataclass

from markupsafe import Markup, escape

WIDTH, HEIGHT = 720, 260
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 12, 44
PLOT_WIDTH, PLOT_HEIGHT = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
BAR_SHARE = 0.7  # of each category's band; the rest is the gap between bars
MAX_CATEGORY_LABELS = 8  # more would overlap: every n-th category is labelled, the table has them all


def nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, … at least `value` (at least 1): the top of the scale."""
    if value <= 1:
        return 1
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def _number(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"


@dataclass(frozen=True)
class Series:
    name: str
    tone: str  # its colour, by meaning: "good", "other", "neutral" or "bad" (console.css: .tone-…)


@dataclass(frozen=True)
class StackedBars:
    """`values[i][j]`: the count of series j in category i (categories in the order drawn, left to right)."""

    chart_id: str
    title: str
    description: str
    category_name: str
    categories: tuple[str, ...]
    series: tuple[Series, ...]
    values: tuple[tuple[int, ...], ...]

    @property
    def totals(self) -> tuple[int, ...]:
        return tuple(sum(row) for row in self.values)

    @property
    def scale_max(self) -> int:
        return nice_ceiling(max(self.totals, default=0))

    def svg(self) -> Markup:
        title_id, description_id = f"{self.chart_id}-title", f"{self.chart_id}-description"
        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" '
                 f'role="img" aria-labelledby="{title_id} {description_id}">',
                 f'<title id="{title_id}">{escape(self.title)}</title>',
                 f'<desc id="{description_id}">{escape(self.description)}</desc>']
        parts += self._axes()
        parts += self._bars()
        parts.append("</svg>")
        return Markup("".join(parts))

    def _axes(self) -> list[str]:
        parts = []
        for share in (0, 0.5, 1):
            y = TOP + PLOT_HEIGHT * (1 - share)
            parts.append(f'<line class="grid" x1="{LEFT}" y1="{y:.2f}" x2="{WIDTH - RIGHT}" y2="{y:.2f}"/>')
            parts.append(f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.2f}" text-anchor="end">'
                         f"{_number(self.scale_max * share)}</text>")
        band = PLOT_WIDTH / max(len(self.categories), 1)
        step = math.ceil(len(self.categories) / MAX_CATEGORY_LABELS) or 1
        for index in range(0, len(self.categories), step):
            x = LEFT + band * (index + 0.5)
            parts.append(f'<text class="tick" x="{x:.2f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
                         f"{escape(self.categories[index])}</text>")
        return parts

    def _bars(self) -> list[str]:
        parts = []
        band = PLOT_WIDTH / max(len(self.categories), 1)
        width = band * BAR_SHARE
        for index, (category, row) in enumerate(zip(self.categories, self.values, strict=True)):
            x = LEFT + band * index + (band - width) / 2
            base = TOP + PLOT_HEIGHT
            for series, value in zip(self.series, row, strict=True):
                if not value:
                    continue
                height = PLOT_HEIGHT * value / self.scale_max
                base -= height
                parts.append(f'<rect class="tone-{series.tone}" x="{x:.2f}" y="{base:.2f}" width="{width:.2f}" '
                             f'height="{height:.2f}"><title>{escape(category)}: {escape(series.name)} {value:,}'
                             "</title></rect>")
        return parts
