//! Text layout: section titles, aligned `key  value` lines and tables.

/// A blank line and `== title ==`.
pub(crate) fn section(out: &mut Vec<String>, title: &str) {
    out.push(String::new());
    out.push(format!("== {title} =="));
}

/// `key  value` lines with the values aligned.
pub(crate) fn key_values(kv: &[(String, String)], indent: usize) -> Vec<String> {
    let width = kv.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    let pad = " ".repeat(indent);
    kv.iter()
        .map(|(k, v)| {
            let fill = " ".repeat(width - k.chars().count());
            format!("{pad}{k}{fill}  {v}")
        })
        .collect()
}

/// A table: the first `text_columns` columns left-aligned, the rest right-aligned.
pub(crate) fn columns(
    head: &[&str],
    text_columns: usize,
    body: &[Vec<String>],
    indent: usize,
) -> Vec<String> {
    let mut widths: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for row in body {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let pad = " ".repeat(indent);
    let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
        let parts: Vec<String> = cells
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, &w))| {
                let fill = " ".repeat(w - cell.chars().count());
                if i < text_columns {
                    format!("{cell}{fill}")
                } else {
                    format!("{fill}{cell}")
                }
            })
            .collect();
        format!("{pad}{}", parts.join("  ").trim_end())
    };
    let mut lines = vec![line(&mut head.iter().copied())];
    for row in body {
        lines.push(line(&mut row.iter().map(String::as_str)));
    }
    lines
}
