//! Charts as SVG text, drawn with plotters' SVG backend (no fonts loaded: the browser draws
//! the text). Three shapes cover the reports: columns over categories (stacked or grouped
//! series, e.g. outcomes per day), horizontal bars (one value per name, e.g. issue codes) and
//! lines over a numeric axis (e.g. `enforce eval`'s valid rate against tokens spent).

use plotters::coord::ranged1d::{AsRangedCoord, DefaultFormatting, KeyPointHint, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::ops::Range;

/// The colour of a series, re-exported so that callers need no plotters of their own.
pub use plotters::style::RGBColor;

const WIDTH: u32 = 760;
const HEIGHT: u32 = 340;
/// Category labels longer than this are shortened (the table beneath has them whole).
const MAX_LABEL_CHARS: usize = 48;
/// At most this many category labels on a column chart's axis; the others are skipped.
const MAX_AXIS_LABELS: usize = 12;

/// A chart that could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("cannot draw the chart \"{title}\": {message}")]
pub struct ChartError {
    title: String,
    message: String,
}

/// One series of a column chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Its name in the legend.
    pub name: String,
    /// Its colour.
    pub color: RGBColor,
    /// One value per category.
    pub values: Vec<f64>,
}

/// One line of a line chart.
#[derive(Debug, Clone)]
pub struct Line {
    /// Its name in the legend.
    pub name: String,
    /// Its colour.
    pub color: RGBColor,
    /// Its points, (x, y), in the order drawn.
    pub points: Vec<(f64, f64)>,
    /// Dashed (a reference, e.g. an estimate) rather than solid.
    pub dashed: bool,
}

/// How several series share a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// On top of each other (parts of a whole).
    Stacked,
    /// Side by side on a logarithmic axis (values of different magnitudes).
    GroupedLog,
}

/// An axis of `n` categories: category i spans i..i+1 and is labelled at its centre (every
/// `step`-th only, so that labels do not overlap).
struct Categories {
    n: usize,
    step: usize,
    linear: RangedCoordf64,
}

impl Categories {
    fn new(n: usize, step: usize) -> Categories {
        Categories {
            n,
            step: step.max(1),
            linear: (0.0..n as f64).into(),
        }
    }
}

impl Ranged for Categories {
    // Labels come from the chart's label formatter, so the default (Debug) one is never used.
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.linear.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            return Vec::new();
        }
        (0..self.n)
            .step_by(self.step)
            .map(|i| i as f64 + 0.5)
            .collect()
    }

    fn range(&self) -> Range<f64> {
        0.0..self.n as f64
    }
}

type Drawn = Result<(), DrawingAreaErrorKind<std::io::Error>>;

/// Draws into an SVG string; the `xmlns` attribute is dropped because inline SVG in HTML
/// needs none, and the page must hold no URL at all.
fn svg(
    title: &str,
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Drawn,
) -> Result<String, ChartError> {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)
            .and_then(|()| draw(&root))
            .and_then(|()| root.present())
            .map_err(|e| ChartError {
                title: title.to_string(),
                message: e.to_string(),
            })?;
    }
    Ok(text.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1))
}

fn short(label: &str) -> String {
    if label.chars().count() <= MAX_LABEL_CHARS {
        label.to_string()
    } else {
        let mut cut: String = label.chars().take(MAX_LABEL_CHARS - 1).collect();
        cut.push('…');
        cut
    }
}

/// The label of the category whose centre is at `x`.
fn label_at(categories: &[String], x: f64) -> String {
    let index = x.floor();
    if index < 0.0 {
        return String::new();
    }
    categories
        .get(index as usize)
        .map(|c| short(c))
        .unwrap_or_default()
}

fn no_data(root: &DrawingArea<SVGBackend, Shift>, title: &str) -> Drawn {
    let style = TextStyle::from(("sans-serif", 16).into_font());
    root.draw(&Text::new(title.to_string(), (10, 10), style.clone()))?;
    root.draw(&Text::new(
        "no data".to_string(),
        (WIDTH as i32 / 2 - 30, HEIGHT as i32 / 2),
        style,
    ))
}

/// A column chart: one column (or group) per category.
pub fn columns(
    title: &str,
    y_desc: &str,
    categories: &[String],
    series: &[Series],
    layout: Layout,
) -> Result<String, ChartError> {
    svg(title, |root| {
        if categories.is_empty() || series.is_empty() {
            return no_data(root, title);
        }
        let values = |i: usize| {
            series
                .iter()
                .map(move |s| s.values.get(i).copied().unwrap_or(0.0))
        };
        let n = categories.len();
        let top = (0..n)
            .map(|i| match layout {
                Layout::Stacked => values(i).sum(),
                Layout::GroupedLog => values(i).fold(0.0, f64::max),
            })
            .fold(0.0, f64::max);
        let chart = ColumnChart {
            title,
            y_desc,
            categories,
            series,
            layout,
        };
        if layout == Layout::GroupedLog {
            // From the power of ten below the smallest value to above the largest.
            let smallest = (0..n)
                .flat_map(values)
                .filter(|v| *v > 0.0)
                .fold(f64::INFINITY, f64::min);
            let floor = if smallest.is_finite() {
                10f64.powf(smallest.log10().floor())
            } else {
                1.0
            };
            // Headroom above the tallest column for the legend (upper right).
            let y_max = (top * 8.0).max(floor * 10.0);
            chart.draw(root, (floor..y_max).log_scale(), floor)
        } else {
            // Headroom above the tallest column, for the legend when there is one.
            let headroom = if series.len() > 1 { 1.5 } else { 1.1 };
            let y_max = if top > 0.0 { top * headroom } else { 1.0 };
            chart.draw(root, 0f64..y_max, 0.0)
        }
    })
}

/// What [`columns`] draws, apart from the vertical axis.
struct ColumnChart<'a> {
    title: &'a str,
    y_desc: &'a str,
    categories: &'a [String],
    series: &'a [Series],
    layout: Layout,
}

impl ColumnChart<'_> {
    /// Draws on the vertical axis `y`, with the columns standing on `base`.
    fn draw<Y>(&self, root: &DrawingArea<SVGBackend, Shift>, y: Y, base: f64) -> Drawn
    where
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let (categories, series) = (self.categories, self.series);
        let n = categories.len();
        let mut chart = ChartBuilder::on(root)
            .caption(self.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(Categories::new(n, n.div_ceil(MAX_AXIS_LABELS)), y)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(TRANSPARENT)
            .x_labels(MAX_AXIS_LABELS)
            .x_label_formatter(&|x| label_at(categories, *x))
            .y_label_formatter(&|v| tick(*v))
            .y_desc(self.y_desc)
            .draw()?;
        let group = series.len() as f64;
        for (k, s) in series.iter().enumerate() {
            let color = s.color;
            let rectangles = (0..n).filter_map(|i| {
                let value = s.values.get(i).copied().unwrap_or(0.0);
                if value <= 0.0 || !value.is_finite() {
                    return None;
                }
                let x = i as f64;
                let (x0, x1, y0, y1) = match self.layout {
                    Layout::Stacked => {
                        let below: f64 = series[..k]
                            .iter()
                            .map(|s| s.values.get(i).copied().unwrap_or(0.0))
                            .sum();
                        (x + 0.15, x + 0.85, below, below + value)
                    }
                    Layout::GroupedLog => {
                        let width = 0.7 / group;
                        let x0 = x + 0.15 + width * k as f64;
                        (x0, x0 + width, base, value.max(base))
                    }
                };
                Some(Rectangle::new([(x0, y0), (x1, y1)], color.filled()))
            });
            let drawn = chart.draw_series(rectangles)?;
            if series.len() > 1 {
                drawn.label(s.name.clone()).legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
            }
        }
        if series.len() > 1 {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.4))
                .draw()?;
        }
        Ok(())
    }
}

/// An axis label: whole numbers without decimals, others with up to three.
fn tick(value: f64) -> String {
    if (value - value.round()).abs() < 1e-9 {
        format!("{}", value.round())
    } else {
        let text = format!("{value:.3}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A horizontal bar chart: one bar per name, the first on top.
pub fn bars(
    title: &str,
    x_desc: &str,
    names: &[String],
    values: &[f64],
    color: RGBColor,
    x_max: Option<f64>,
) -> Result<String, ChartError> {
    svg(title, |root| {
        if names.is_empty() {
            return no_data(root, title);
        }
        let n = names.len();
        let top = values.iter().copied().fold(0.0, f64::max);
        let x_max = x_max.unwrap_or(if top > 0.0 { top * 1.1 } else { 1.0 });
        // Row i from the top sits between n-i-1 and n-i.
        let reversed: Vec<String> = names.iter().rev().cloned().collect();
        let longest = names
            .iter()
            .map(|s| short(s).chars().count())
            .max()
            .unwrap_or(0);
        let label_width = (longest as u32 * 7 + 16).clamp(60, WIDTH / 2);
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(label_width)
            .build_cartesian_2d(0f64..x_max, Categories::new(n, 1))?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .light_line_style(TRANSPARENT)
            .y_labels(n)
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|y| label_at(&reversed, *y))
            .x_desc(x_desc)
            .draw()?;
        chart.draw_series(values.iter().enumerate().map(|(i, value)| {
            let y = (n - i - 1) as f64;
            Rectangle::new(
                [(0.0, y + 0.15), (value.max(0.0), y + 0.85)],
                color.filled(),
            )
        }))?;
        Ok(())
    })
}

/// A line chart over numeric axes from 0: x up to the largest x, y up to `y_max` (default the
/// largest y, with room for the legend).
pub fn lines(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    lines: &[Line],
    y_max: Option<f64>,
) -> Result<String, ChartError> {
    svg(title, |root| {
        let finite = |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite();
        let all = || {
            lines
                .iter()
                .flat_map(|l| l.points.iter().copied().filter(finite))
        };
        if all().next().is_none() {
            return no_data(root, title);
        }
        let x_top = all().map(|p| p.0).fold(0.0, f64::max);
        let y_top = all().map(|p| p.1).fold(0.0, f64::max);
        let x_max = if x_top > 0.0 { x_top * 1.05 } else { 1.0 };
        let y_max = y_max.unwrap_or(if y_top > 0.0 { y_top * 1.3 } else { 1.0 });
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .x_desc(x_desc)
            .y_desc(y_desc)
            .draw()?;
        for line in lines {
            let color = line.color;
            let style = color.stroke_width(2);
            let points: Vec<(f64, f64)> = line.points.iter().copied().filter(finite).collect();
            let drawn = if line.dashed {
                chart.draw_series(DashedLineSeries::new(points, 6, 4, style))?
            } else {
                chart.draw_series(LineSeries::new(points, style))?
            };
            drawn.label(line.name.clone()).legend(move |(x, y)| {
                PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2))
            });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .draw()?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_one_svg_with_its_labels_escaped_and_no_url() {
        let svg = bars(
            "Codes",
            "found",
            &["a<b>&c".to_string(), "plain".to_string()],
            &[3.0, 1.0],
            RED,
            None,
        )
        .expect("draws");
        assert_eq!(svg.matches("<svg").count(), 1);
        assert!(
            svg.contains("a&lt;b&gt;&amp;c") || svg.contains("a&lt;b>&amp;c"),
            "{svg}"
        );
        assert!(!svg.contains("http"), "{svg}");
        assert!(svg.matches("<rect").count() >= 2);
    }

    #[test]
    fn a_line_chart_draws_each_line_and_its_legend() {
        let line = |name: &str, dashed| Line {
            name: name.into(),
            color: BLUE,
            points: vec![(0.0, 0.0), (10.0, 40.0), (25.0, 60.0)],
            dashed,
        };
        let one = lines("T", "tokens", "%", &[line("arm", false)], Some(100.0)).expect("draws");
        let two = lines(
            "T",
            "tokens",
            "%",
            &[line("arm", false), line("estimate", true)],
            Some(100.0),
        )
        .expect("draws");
        assert!(one.contains("arm") && two.contains("estimate"), "{two}");
        // A dashed line is drawn as several segments.
        assert!(two.matches("<polyline").count() > one.matches("<polyline").count() + 1);
        let empty = lines("T", "x", "y", &[], None).expect("draws");
        assert!(empty.contains("no data"));
    }

    #[test]
    fn empty_charts_say_so() {
        let svg = columns("Nothing", "n", &[], &[], Layout::Stacked).expect("draws");
        assert!(svg.contains("no data"));
    }

    #[test]
    fn stacked_columns_draw_one_rectangle_per_nonzero_value() {
        let series = vec![
            Series {
                name: "a".into(),
                color: GREEN,
                values: vec![1.0, 0.0, 2.0],
            },
            Series {
                name: "b".into(),
                color: RED,
                values: vec![1.0, 1.0, 0.0],
            },
        ];
        let categories: Vec<String> = ["x", "y", "z"].iter().map(|s| s.to_string()).collect();
        let with = columns("T", "n", &categories, &series, Layout::Stacked).expect("draws");
        let without = columns("T", "n", &categories, &series[..1], Layout::Stacked).expect("draws");
        // Series b adds two bars and a legend swatch (plus the legend box).
        assert!(with.matches("<rect").count() >= without.matches("<rect").count() + 3);
    }
}
