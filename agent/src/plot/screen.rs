//! A terminal screen capture (text with ANSI SGR colours, as `tmux capture-pane -p -e` prints
//! it) drawn as SVG, so that a real `tcpvigil watch` screen can be shown as a picture.
use std::fmt::Write as _;

/// Cell size in pixels and the font that fills it (DejaVu Sans Mono advances 0.602 em).
const CW: f64 = 8.0;
const CH: f64 = 16.0;
pub const BACKGROUND: (u8, u8, u8) = (0x1e, 0x1e, 0x1e);
const FOREGROUND: (u8, u8, u8) = (0xd0, 0xd0, 0xd0);

/// The 16 ANSI colours (a dark theme).
const ANSI16: [(u8, u8, u8); 16] = [
    (0x1e, 0x1e, 0x1e),
    (0xe0, 0x52, 0x52),
    (0x5f, 0xbf, 0x5f),
    (0xe5, 0xc0, 0x7b),
    (0x5f, 0x87, 0xd7),
    (0xc6, 0x78, 0xdd),
    (0x56, 0xb6, 0xc2),
    (0xb0, 0xb0, 0xb0),
    (0x6b, 0x6b, 0x6b),
    (0xff, 0x7b, 0x72),
    (0x8f, 0xe0, 0x8f),
    (0xf0, 0xe0, 0x8a),
    (0x79, 0xb8, 0xff),
    (0xe0, 0xa0, 0xf0),
    (0x8b, 0xe9, 0xfd),
    (0xf0, 0xf0, 0xf0),
];

type Rgb = (u8, u8, u8);

/// One character cell: symbol, colours (None: the default) and boldness.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cell {
    pub ch: char,
    pub fg: Option<Rgb>,
    pub bg: Option<Rgb>,
    pub bold: bool,
}

const BLANK: Cell = Cell { ch: ' ', fg: None, bg: None, bold: false };

/// xterm's 256-colour palette.
fn indexed(i: u8) -> Rgb {
    match i {
        0..=15 => ANSI16[i as usize],
        16..=231 => {
            let i = i - 16;
            let level = |v: u8| if v == 0 { 0 } else { 55 + 40 * v };
            (level(i / 36), level(i / 6 % 6), level(i % 6))
        }
        _ => {
            let g = 8 + 10 * (i - 232);
            (g, g, g)
        }
    }
}

/// Apply one SGR parameter list (`1;38;5;12`) to the pen.
fn sgr(params: &str, pen: &mut Cell) {
    let p: Vec<u16> = params.split([';', ':']).map(|x| x.parse().unwrap_or(0)).collect();
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            0 => *pen = BLANK,
            1 => pen.bold = true,
            22 => pen.bold = false,
            c @ 30..=37 => pen.fg = Some(ANSI16[(c - 30) as usize]),
            c @ 90..=97 => pen.fg = Some(ANSI16[(c - 90 + 8) as usize]),
            c @ 40..=47 => pen.bg = Some(ANSI16[(c - 40) as usize]),
            c @ 100..=107 => pen.bg = Some(ANSI16[(c - 100 + 8) as usize]),
            39 => pen.fg = None,
            49 => pen.bg = None,
            c @ (38 | 48) => {
                let colour = match p.get(i + 1) {
                    Some(5) => {
                        let col = p.get(i + 2).map(|&v| indexed(v.min(255) as u8));
                        i += 2;
                        col
                    }
                    Some(2) => {
                        let v = |k: usize| p.get(i + k).map_or(0, |&x| x.min(255) as u8);
                        let col = Some((v(2), v(3), v(4)));
                        i += 4;
                        col
                    }
                    _ => None,
                };
                if c == 38 {
                    pen.fg = colour;
                } else {
                    pen.bg = colour;
                }
            }
            _ => {}
        }
        i += 1;
    }
}

/// Parse a capture into `rows` x `cols` cells; escape sequences other than SGR are skipped.
pub fn parse(text: &str, cols: usize, rows: usize) -> Vec<Vec<Cell>> {
    let mut grid = vec![vec![BLANK; cols]; rows];
    let mut pen = BLANK;
    for (y, line) in text.lines().take(rows).enumerate() {
        let mut x = 0;
        let mut it = line.chars().peekable();
        while let Some(c) = it.next() {
            if c == '\u{1b}' {
                if it.peek() == Some(&'[') {
                    it.next();
                    let mut params = String::new();
                    for d in it.by_ref() {
                        if d.is_ascii_alphabetic() {
                            if d == 'm' {
                                sgr(&params, &mut pen);
                            }
                            break;
                        }
                        params.push(d);
                    }
                }
                continue;
            }
            if x < cols {
                grid[y][x] = Cell { ch: c, ..pen };
            }
            x += 1;
        }
    }
    grid
}

fn hex(c: Rgb) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// The capture as an SVG of `cols` x `rows` cells (8 x 16 px each) on a dark background.
pub fn svg(text: &str, cols: usize, rows: usize) -> String {
    let grid = parse(text, cols, rows);
    let (w, h) = (cols as f64 * CW, rows as f64 * CH);
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="DejaVu Sans Mono, monospace" font-size="13.3"><rect width="{w}" height="{h}" fill="{}"/>"#,
        hex(BACKGROUND)
    );
    for (y, row) in grid.iter().enumerate() {
        for (x, c) in row.iter().enumerate() {
            let (px, py) = (x as f64 * CW, y as f64 * CH);
            if let Some(bg) = c.bg {
                let _ = write!(s, r#"<rect x="{px}" y="{py}" width="{CW}" height="{CH}" fill="{}"/>"#, hex(bg));
            }
            if c.ch.is_whitespace() {
                continue;
            }
            let mut buf = [0u8; 4];
            let esc = match c.ch {
                '&' => "&amp;",
                '<' => "&lt;",
                '>' => "&gt;",
                ch => ch.encode_utf8(&mut buf),
            };
            let bold = if c.bold { r#" font-weight="bold""# } else { "" };
            let fill = hex(c.fg.unwrap_or(FOREGROUND));
            let _ = write!(s, r#"<text x="{px}" y="{}" fill="{fill}"{bold}>{esc}</text>"#, py + 12.5);
        }
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sgr_colours_bold_and_reset_land_in_the_right_cells() {
        let text = "a\u{1b}[1;38;5;196mB\u{1b}[0m c\u{1b}[48;2;1;2;3m<\u{1b}[39;49m\u{1b}[K\nx\u{1b}[92my";
        let g = parse(text, 6, 2);
        assert_eq!(g[0][0], Cell { ch: 'a', fg: None, bg: None, bold: false });
        assert_eq!(g[0][1], Cell { ch: 'B', fg: Some((255, 0, 0)), bg: None, bold: true });
        assert_eq!(g[0][2], BLANK);
        assert_eq!(g[0][4], Cell { ch: '<', fg: None, bg: Some((1, 2, 3)), bold: false });
        assert_eq!(g[0][5], BLANK, "an erase sequence is not a character");
        assert_eq!(g[1][1].fg, Some(ANSI16[10]));
        assert_eq!(indexed(232), (8, 8, 8));
        assert_eq!(indexed(16 + 36 + 6 + 1), (95, 95, 95));
    }

    #[test]
    fn the_svg_has_the_cell_grid_size_escapes_markup_and_rasterises() {
        let s = svg("\u{1b}[31m<tcp>&\u{1b}[0m ⣿", 10, 2);
        assert!(s.contains(r#"width="80" height="32""#), "{s}");
        assert!(s.contains(">&lt;</text>") && s.contains(">&amp;</text>") && s.contains(">⣿</text>"), "{s}");
        assert!(s.contains(r##"fill="#e05252">t</text>"##), "{s}");
        let png = crate::plot::svg::png(&s).unwrap();
        let p = resvg::tiny_skia::Pixmap::decode_png(&png).unwrap();
        assert_eq!((p.width(), p.height()), (80, 32));
    }
}
