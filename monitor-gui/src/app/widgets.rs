//! What the views share: row height, colours by health, table stripes and cells, the clock.

use egui::{Color32, RichText};

use crate::model::Health;

pub(super) const ROW_H: f32 = 20.0;

/// Text of figures that are not current (a stale registration's last ones).
pub(super) const STALE_TEXT: Color32 = Color32::from_gray(120);

pub(super) fn ui_text_color() -> Color32 {
    Color32::from_gray(200)
}

/// Text colour of a row by health.
pub fn health_color(h: Health) -> Color32 {
    match h {
        Health::Ok => ui_text_color(),
        Health::Warning => Color32::from_rgb(240, 170, 40),
        Health::Error => Color32::from_rgb(240, 80, 70),
    }
}

pub(super) fn health_fill(h: Health) -> Color32 {
    match h {
        Health::Ok => Color32::from_rgb(110, 190, 110),
        Health::Warning => Color32::from_rgb(240, 180, 60),
        Health::Error => Color32::from_rgb(235, 95, 85),
    }
}

/// The stripe behind every other table row, painted from the row's first cell (before its content) as one
/// rectangle across the table's visible width. `TableBuilder::striped` paints one per cell, each with its own
/// anti-aliasing fringe: at 1000 topics that is most of the triangles of the Overview, and under software GL it cost
/// about as much as everything else the tables draw.
pub(super) fn stripe(cell: &egui::Ui, row_index: usize) {
    use egui::emath::GuiRounding as _;
    if !row_index.is_multiple_of(2) {
        return;
    }
    // The cells are not clipped to themselves: their clip rectangle is the table body's visible part.
    let gap = 0.5 * cell.spacing().item_spacing.y;
    let rect = egui::Rect::from_x_y_ranges(cell.clip_rect().x_range(), cell.max_rect().y_range().expand(gap));
    cell.painter().rect_filled(rect.round_ui(), 0.0, cell.visuals().faint_bg_color);
}

/// One label cell per text, all in `color`.
pub(super) fn text_cells(
    row: &mut egui_extras::TableRow<'_, '_>,
    color: Color32,
    cells: impl IntoIterator<Item = String>,
) {
    for text in cells {
        row.col(|ui| {
            ui.label(RichText::new(text).color(color));
        });
    }
}

pub(super) fn contains_ci(hay: &str, lower_needle: &str) -> bool {
    hay.to_lowercase().contains(lower_needle)
}

/// `hh:mm:ss` (UTC) of a time in seconds since the epoch.
pub fn clock(time_s: f64) -> String {
    let s = time_s.max(0.0) as u64 % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}
