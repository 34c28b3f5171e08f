"""A scatter plot as a standalone SVG file, with no plotting library: the benchmarks run on the
suite's venv, which has none, and an SVG shows on the repository host as it is."""

from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 720, 440
LEFT, RIGHT, TOP, BOTTOM = 70, 170, 50, 90
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf")


@dataclass(frozen=True)
class Point:
    series: str
    x: float
    y: float
    label: str = ""


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    step = (high - low) / count or 1.0
    return [low + i * step for i in range(count + 1)]


def scatter(points: list[Point], title: str, x_label: str, y_label: str, notes: list[str]) -> str:
    """The points, one color per series, with axes from 0 to a little above the largest value;
    `notes` are small lines under the plot (how it was made)."""
    x_max = max(p.x for p in points) * 1.1 or 1.0
    y_max = max(p.y for p in points) * 1.1 or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + x / x_max * plot_w

    def sy(y: float) -> float:
        return TOP + plot_h - y / y_max * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="24" font-size="15">{escape(title)}</text>',
        *(
            f'<text x="8" y="{HEIGHT - 8 - 14 * (len(notes) - 1 - i)}" fill="#555" '
            f'font-size="10">{escape(line)}</text>'
            for i, line in enumerate(notes)
        ),
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" '
        'stroke="black"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="black"/>',
        f'<text x="{LEFT + plot_w / 2}" y="{TOP + plot_h + 36}" text-anchor="middle">'
        f"{escape(x_label)}</text>",
        f'<text transform="translate(18 {TOP + plot_h / 2}) rotate(-90)" text-anchor="middle">'
        f"{escape(y_label)}</text>",
    ]
    for x in _ticks(0, x_max):
        parts.append(
            f'<text x="{sx(x):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">{x:.0f}</text>'
        )
    for y in _ticks(0, y_max):
        parts.append(
            f'<text x="{LEFT - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.0f}</text>'
            f'<line x1="{LEFT}" y1="{sy(y):.1f}" x2="{LEFT + plot_w}" y2="{sy(y):.1f}" '
            'stroke="#eee"/>'
        )
    series = list(dict.fromkeys(p.series for p in points))
    for index, name in enumerate(series):
        color = COLORS[index % len(COLORS)]
        for p in (p for p in points if p.series == name):
            parts.append(
                f'<circle cx="{sx(p.x):.1f}" cy="{sy(p.y):.1f}" r="5" fill="{color}"/>'
                f'<text x="{sx(p.x) + 7:.1f}" y="{sy(p.y) - 6:.1f}" fill="{color}">'
                f"{escape(p.label)}</text>"
            )
        legend_y = TOP + 18 * index
        parts.append(
            f'<circle cx="{WIDTH - RIGHT + 20}" cy="{legend_y}" r="5" fill="{color}"/>'
            f'<text x="{WIDTH - RIGHT + 30}" y="{legend_y + 4}">{escape(name)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
