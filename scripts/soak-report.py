#!/usr/bin/env python3
"""soak-report.py: prints the drift of a soak CSV (scripts/bench-soak.sh) and draws it as an SVG.
Usage: soak-report.py soak.csv out.svg   (exit 1 when RSS, series or fds rise in the second half
above their highest in the first)"""
import csv
import sys

if len(sys.argv) != 3:
    sys.exit(__doc__)
rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(open(sys.argv[1]))]
if len(rows) < 4:
    print("soak-report: fewer than 4 samples", file=sys.stderr)
    sys.exit(2)
half = len(rows) // 2
mid, last = rows[half], rows[-1]
span_min = (last["t_s"] - rows[0]["t_s"]) / 60
cpu_pct = 100 * (last["cpu_s"] - rows[0]["cpu_s"]) / max(1, last["t_s"] - rows[0]["t_s"])
print(f"soak: {len(rows)} samples over {span_min:.0f} min; daemon CPU {cpu_pct:.2f} % of one core")
bad = []
for k, unit, slack in [("rss_kib", "KiB", 0.10), ("series", "", 0.10), ("fds", "", 0.0)]:
    lo = min(r[k] for r in rows[half:])
    hi = max(r[k] for r in rows[half:])
    print(f"  {k:8} first {rows[0][k]:.0f}, mid {mid[k]:.0f}, last {last[k]:.0f}, 2nd half {lo:.0f}..{hi:.0f} {unit}")
    # Flat: nothing in the second half above the first half's highest plus the slack (and 2 fds
    # of jitter). Not the last sample against the middle one: series follow the connections open
    # at each scrape and swing by 15 % between two samples.
    if hi > max(r[k] for r in rows[:half]) * (1 + slack) + (2 if k == "fds" else 0):
        bad.append(k)
print(f"  scrape   median {sorted(r['scrape_ms'] for r in rows)[len(rows)//2]:.0f} ms, max {max(r['scrape_ms'] for r in rows):.0f} ms")

W, H, P = 720, 150, 40
panels = [("rss_kib", "RSS (MiB)", 1 / 1024), ("series", "/metrics series", 1), ("cpu_s", "CPU (s, cumulative)", 1), ("fds", "open fds", 1)]
t1 = max(1, last["t_s"])
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H*len(panels)}" font-family="sans-serif" font-size="11">',
       f'<rect width="100%" height="100%" fill="white"/>']
for i, (k, label, scale) in enumerate(panels):
    y0 = i * H
    vals = [r[k] * scale for r in rows]
    vmax = max(vals) * 1.15 or 1
    pts = " ".join(f"{P + (W - 2*P) * r['t_s'] / t1:.1f},{y0 + H - 25 - (H - 45) * v / vmax:.1f}" for r, v in zip(rows, vals))
    svg += [f'<text x="{P}" y="{y0+14}">{label}: first {vals[0]:.1f}, last {vals[-1]:.1f}, max {max(vals):.1f}</text>',
            f'<line x1="{P}" y1="{y0+H-25}" x2="{W-P}" y2="{y0+H-25}" stroke="#999"/>',
            f'<text x="{W-P}" y="{y0+H-10}" text-anchor="end">{t1/60:.0f} min</text>',
            f'<text x="{P-4}" y="{y0+H-25}" text-anchor="end">0</text>',
            f'<text x="{P-4}" y="{y0+25}" text-anchor="end">{vmax:.0f}</text>',
            f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{pts}"/>']
svg.append("</svg>")
open(sys.argv[2], "w").write("\n".join(svg))
print(f"  plot: {sys.argv[2]}")
if bad:
    print(f"soak: NOT FLAT: {', '.join(bad)} grew in the second half", file=sys.stderr)
    sys.exit(1)
