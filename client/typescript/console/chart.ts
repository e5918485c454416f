/** A small SVG line chart of several series over the last minutes, fed by polling. */

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 640;
const HEIGHT = 180;
const PAD = { left: 48, right: 12, top: 12, bottom: 24 };
// colour-blind-safe (Okabe-Ito)
const COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"];

interface Sample {
  atMs: number;
  value: number;
}

/** Samples of named series within a time window, and the SVG that draws them. */
export class TimeChart {
  readonly element: SVGSVGElement;
  private readonly series = new Map<string, Sample[]>();
  private readonly windowMs: number;
  private readonly unit: string;
  private readonly title: string;

  constructor(title: string, unit: string, windowMs = 5 * 60_000) {
    this.windowMs = windowMs;
    this.unit = unit;
    this.title = title;
    this.element = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img",
                                class: "chart", "aria-label": title }) as SVGSVGElement;
    this.draw(Date.now());
  }

  /** Add one sample per series taken at `atMs`, drop what left the window, and redraw. */
  add(values: Map<string, number>, atMs = Date.now()): void {
    for (const [name, value] of values) {
      const samples = this.series.get(name) ?? [];
      samples.push({ atMs, value });
      this.series.set(name, samples);
    }
    for (const samples of this.series.values()) {
      while (samples.length > 0 && (samples[0]?.atMs ?? atMs) < atMs - this.windowMs) {
        samples.shift();
      }
    }
    this.draw(atMs);
  }

  /** The newest value of every series, for the chart's text alternative and tests. */
  latest(): Map<string, number> {
    const found = new Map<string, number>();
    for (const [name, samples] of this.series) {
      const last = samples[samples.length - 1];
      if (last !== undefined) found.set(name, last.value);
    }
    return found;
  }

  private draw(nowMs: number): void {
    const root = this.element;
    // the lines are not readable to a screen reader: the newest values are its text alternative
    const newest = [...this.latest()].map(([name, value]) => `${name} ${formatValue(value)}`);
    root.setAttribute("aria-label", newest.length === 0 ? this.title
      : `${this.title}; now ${newest.join(", ")}`);
    while (root.firstChild) root.removeChild(root.firstChild);
    const values = [...this.series.values()].flat().map((s) => s.value);
    const top = niceMax(Math.max(1, ...values));
    const x = (atMs: number): number =>
      PAD.left + (WIDTH - PAD.left - PAD.right) * (1 - (nowMs - atMs) / this.windowMs);
    const y = (value: number): number =>
      HEIGHT - PAD.bottom - (HEIGHT - PAD.top - PAD.bottom) * (value / top);
    root.appendChild(svg("rect", { x: PAD.left, y: PAD.top, width: WIDTH - PAD.left - PAD.right,
                                   height: HEIGHT - PAD.top - PAD.bottom, class: "plot" }));
    for (const fraction of [0, 0.5, 1]) {
      const level = y(top * fraction);
      root.appendChild(svg("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: level, y2: level,
                                     class: "grid" }));
      root.appendChild(label(PAD.left - 6, level + 4, formatValue(top * fraction), "end"));
    }
    const minutes = Math.round(this.windowMs / 60_000);
    root.appendChild(label(PAD.left, HEIGHT - 6, `${minutes} min ago`, "start"));
    root.appendChild(label(WIDTH - PAD.right, HEIGHT - 6, `now (${this.unit})`, "end"));
    let index = 0;
    for (const [name, samples] of this.series) {
      const colour = COLOURS[index % COLOURS.length] ?? "#000";
      const points = samples.map((s) => `${x(s.atMs).toFixed(1)},${y(s.value).toFixed(1)}`);
      if (points.length === 1) points.push(points[0] ?? "");
      root.appendChild(svg("polyline", { points: points.join(" "), fill: "none", stroke: colour,
                                         "stroke-width": 2 }));
      const legendX = PAD.left + 8 + index * 90;
      root.appendChild(svg("rect", { x: legendX, y: PAD.top + 4, width: 10, height: 10,
                                     fill: colour }));
      root.appendChild(label(legendX + 14, PAD.top + 13, name, "start"));
      index++;
    }
  }
}

function svg(tag: string, attributes: Record<string, string | number>): SVGElement {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, String(value));
  return element;
}

function label(x: number, y: number, text: string, anchor: "start" | "end"): SVGElement {
  const element = svg("text", { x, y, "text-anchor": anchor, class: "axis" });
  element.textContent = text;
  return element;
}

/** 1, 2 or 5 times a power of ten, at or above `value`. */
function niceMax(value: number): number {
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

function formatValue(value: number): string {
  if (value >= 1_000_000) return `${(value / 1_000_000).toFixed(1)}M`;
  if (value >= 1000) return `${(value / 1000).toFixed(1)}k`;
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}
