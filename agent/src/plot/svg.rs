//! A small SVG writer for the plots (panels, axes, ticks, polylines) and the PNG rasteriser.
use std::fmt::Write as _;
use std::sync::{Arc, OnceLock};

use resvg::{tiny_skia, usvg};

/// Builds one SVG document as a string.
pub struct Svg {
    buf: String,
    pub w: u32,
    pub h: u32,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

impl Svg {
    pub fn new(w: u32, h: u32) -> Self {
        let mut buf = String::with_capacity(256 * 1024);
        let _ = write!(
            buf,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="DejaVu Sans, Arial, sans-serif">"#
        );
        let _ = write!(buf, r##"<rect x="0" y="0" width="{w}" height="{h}" fill="#ffffff"/>"##);
        Svg { buf, w, h }
    }

    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, opacity: f64) {
        let _ = write!(
            self.buf,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{fill}" fill-opacity="{opacity}"/>"#,
            w.max(0.5),
            h.max(0.0)
        );
    }

    pub fn frame(&mut self, x: f64, y: f64, w: f64, h: f64, stroke: &str) {
        let _ = write!(
            self.buf,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="none" stroke="{stroke}" stroke-width="1"/>"#
        );
    }

    pub fn line(&mut self, a: (f64, f64), b: (f64, f64), stroke: &str, width: f64, dash: Option<&str>) {
        let dash = dash.map(|d| format!(r#" stroke-dasharray="{d}""#)).unwrap_or_default();
        let _ = write!(
            self.buf,
            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{stroke}" stroke-width="{width}"{dash}/>"#,
            a.0, a.1, b.0, b.1
        );
    }

    /// A polyline through pixel points; `fill_to` closes it down to that y and fills it lightly.
    pub fn polyline(&mut self, pts: &[(f64, f64)], stroke: &str, width: f64, fill_to: Option<f64>, dash: Option<&str>) {
        if pts.is_empty() {
            return;
        }
        let mut p = String::with_capacity(pts.len() * 14);
        for (x, y) in pts {
            let _ = write!(p, "{x:.1},{y:.1} ");
        }
        if let Some(base) = fill_to {
            let (first, last) = (pts[0].0, pts[pts.len() - 1].0);
            let _ = write!(
                self.buf,
                r#"<polygon points="{first:.1},{base:.1} {p}{last:.1},{base:.1}" fill="{stroke}" fill-opacity="0.25" stroke="none"/>"#
            );
        }
        let dash = dash.map(|d| format!(r#" stroke-dasharray="{d}""#)).unwrap_or_default();
        let _ = write!(
            self.buf,
            r#"<polyline points="{p}" fill="none" stroke="{stroke}" stroke-width="{width}" stroke-linejoin="round"{dash}/>"#
        );
    }

    pub fn circle(&mut self, c: (f64, f64), r: f64, fill: &str) {
        let _ = write!(self.buf, r#"<circle cx="{:.1}" cy="{:.1}" r="{r}" fill="{fill}"/>"#, c.0, c.1);
    }

    pub fn cross(&mut self, c: (f64, f64), r: f64, stroke: &str) {
        self.line((c.0 - r, c.1 - r), (c.0 + r, c.1 + r), stroke, 1.6, None);
        self.line((c.0 - r, c.1 + r), (c.0 + r, c.1 - r), stroke, 1.6, None);
    }

    /// Text; `anchor` is start, middle or end; `rotate` turns it about its anchor point.
    #[allow(clippy::too_many_arguments)]
    pub fn text(
        &mut self,
        x: f64,
        y: f64,
        size: f64,
        anchor: &str,
        fill: &str,
        s: &str,
        rotate: Option<f64>,
        bold: bool,
    ) {
        let rot = rotate.map(|r| format!(r#" transform="rotate({r} {x:.1} {y:.1})""#)).unwrap_or_default();
        let weight = if bold { r#" font-weight="bold""# } else { "" };
        let _ = write!(
            self.buf,
            r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" text-anchor="{anchor}" fill="{fill}"{weight}{rot}>{}</text>"#,
            esc(s)
        );
    }

    pub fn finish(mut self) -> String {
        self.buf.push_str("</svg>\n");
        self.buf
    }
}

/// A plotting area: data ranges mapped onto a pixel rectangle.
#[derive(Debug, Clone, Copy)]
pub struct Panel {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
    pub xr: (f64, f64),
    pub yr: (f64, f64),
}

impl Panel {
    pub fn px(&self, v: f64) -> f64 {
        let (a, b) = self.xr;
        self.x + (v - a) / (b - a).max(1e-12) * self.w
    }
    pub fn py(&self, v: f64) -> f64 {
        let (a, b) = self.yr;
        let t = ((v - a) / (b - a).max(1e-12)).clamp(-0.02, 1.02);
        self.y + self.h - t * self.h
    }
    pub fn pt(&self, p: (f64, f64)) -> (f64, f64) {
        (self.px(p.0), self.py(p.1))
    }

    /// Frame, grid, tick labels and axis titles.
    pub fn axes(&self, svg: &mut Svg, xlabel: &str, ylabel: &str) {
        for t in nice_ticks(self.yr.0, self.yr.1, 5) {
            let y = self.py(t);
            svg.line((self.x, y), (self.x + self.w, y), "#e5e5e5", 1.0, None);
            svg.text(self.x - 6.0, y + 4.0, 11.0, "end", "#333", &tick_label(t), None, false);
        }
        for t in nice_ticks(self.xr.0, self.xr.1, 10) {
            let x = self.px(t);
            svg.line((x, self.y), (x, self.y + self.h), "#eeeeee", 1.0, None);
            svg.text(x, self.y + self.h + 14.0, 11.0, "middle", "#333", &tick_label(t), None, false);
        }
        svg.frame(self.x, self.y, self.w, self.h, "#444");
        if !xlabel.is_empty() {
            svg.text(self.x + self.w / 2.0, self.y + self.h + 30.0, 12.0, "middle", "#222", xlabel, None, false);
        }
        let (lx, ly) = (self.x - 52.0, self.y + self.h / 2.0);
        svg.text(lx, ly, 12.0, "middle", "#222", ylabel, Some(-90.0), false);
    }

    /// Data points to pixels, keeping per pixel column the first, lowest, highest and last point
    /// so that spikes survive however many points there are.
    pub fn decimate(&self, pts: impl IntoIterator<Item = (f64, f64)>, out: &mut Vec<(f64, f64)>) {
        out.clear();
        let mut col: Option<i64> = None;
        let mut group: [(f64, f64); 4] = [(0.0, 0.0); 4];
        let flush = |g: &[(f64, f64); 4], out: &mut Vec<(f64, f64)>| {
            let (first, lo, hi, last) = (g[0], g[1], g[2], g[3]);
            let mid = if lo.0 <= hi.0 { [lo, hi] } else { [hi, lo] };
            for p in [first, mid[0], mid[1], last] {
                if out.last() != Some(&p) {
                    out.push(p);
                }
            }
        };
        for (x, y) in pts {
            if !x.is_finite() || !y.is_finite() {
                continue;
            }
            let p = self.pt((x, y));
            let c = p.0.floor() as i64;
            if col != Some(c) {
                if col.is_some() {
                    flush(&group, out);
                }
                col = Some(c);
                group = [p; 4];
            } else {
                // Pixel y grows downwards: "low" on screen is the larger y.
                if p.1 > group[1].1 {
                    group[1] = p;
                }
                if p.1 < group[2].1 {
                    group[2] = p;
                }
                group[3] = p;
            }
        }
        if col.is_some() {
            flush(&group, out);
        }
    }
}

/// About `n` round tick values covering `[lo, hi]`.
pub fn nice_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) || !lo.is_finite() || !hi.is_finite() {
        return vec![lo];
    }
    let raw = (hi - lo) / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let mut t = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while t <= hi + step * 1e-9 && out.len() < 50 {
        out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    out
}

fn tick_label(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a == a.round() {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn fonts() -> Arc<usvg::fontdb::Database> {
    static DB: OnceLock<Arc<usvg::fontdb::Database>> = OnceLock::new();
    DB.get_or_init(|| {
        let mut db = usvg::fontdb::Database::new();
        db.load_system_fonts();
        for f in
            ["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"]
        {
            let _ = db.load_font_file(f);
        }
        db.set_sans_serif_family("DejaVu Sans");
        if db.is_empty() {
            tracing::warn!("no fonts found (install fonts-dejavu-core): PNG pictures will have no text");
        }
        Arc::new(db)
    })
    .clone()
}

#[derive(Debug, thiserror::Error)]
pub enum RasterError {
    #[error("the SVG does not parse: {0}")]
    Parse(#[from] usvg::Error),
    #[error("cannot allocate a {0}x{1} picture")]
    Size(u32, u32),
    #[error("PNG encoding: {0}")]
    Png(String),
}

/// Rasterise an SVG document to PNG bytes at its own size.
pub fn png(svg: &str) -> Result<Vec<u8>, RasterError> {
    let opt = usvg::Options { fontdb: fonts(), ..usvg::Options::default() };
    let tree = usvg::Tree::from_str(svg, &opt)?;
    let size = tree.size().to_int_size();
    let mut pix =
        tiny_skia::Pixmap::new(size.width(), size.height()).ok_or(RasterError::Size(size.width(), size.height()))?;
    resvg::render(&tree, tiny_skia::Transform::default(), &mut pix.as_mut());
    pix.encode_png().map_err(|e| RasterError::Png(e.to_string()))
}
