//! Four lines on top: the target, kernel, view and interval; how each probe role is
//! attached; what was lost and what fdprof itself costs; the diagnosis of the view.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::{cpu, head_style};
use crate::state::{State, View};
use fdprof_profiler::analysis::Report;
use fdprof_profiler::render::human;
use fdprof_recording::escape;

pub(super) const HEIGHT: u16 = 4;

pub(super) fn draw(frame: &mut Frame, area: Rect, state: &State) {
    let mut first = vec![Span::styled("fdprof top", head_style())];
    let Some((report, duration_ns)) = state.report() else {
        first.extend(notice(state));
        first.push(Span::raw(format!(
            "  {}  ? help",
            super::waiting_text(state)
        )));
        frame.render_widget(Paragraph::new(Line::from(first)), area);
        return;
    };
    let h = &report.header;
    let view = match state.view {
        View::Interval => format!("interval {}", human::duration(duration_ns)),
        View::Cumulative => format!("cumulative {}", human::duration(duration_ns)),
    };
    // What the screen is in comes first, so a narrow terminal cuts the target, not the state.
    if state.paused() {
        first.push(Span::styled(
            "  PAUSED",
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ));
    }
    first.extend(notice(state));
    let threads = match h.target.threads {
        Some(1) => "  1 thread".to_string(),
        Some(n) => format!("  {n} threads"),
        None => String::new(),
    };
    first.push(Span::raw(format!(
        "  {view}  ? help  {}{threads}  kernel {}",
        escape::name(&h.target.description),
        escape::name(&h.kernel_release),
    )));
    let probes: Vec<String> = h
        .modes
        .iter()
        .map(|(role, how)| format!("{} {}", escape::name(role), escape::name(how)))
        .collect();
    let lines = vec![
        Line::from(first),
        Line::from(format!("probes: {}", probes.join(", "))),
        Line::from(cost_line(report, duration_ns)),
        diagnosis_line(report),
    ];
    let width = usize::from(area.width);
    let lines: Vec<Line> = lines.into_iter().map(|l| super::fit(l, width)).collect();
    frame.render_widget(Paragraph::new(lines), area);
}

/// What `w` came to, while its notice is up.
fn notice(state: &State) -> Option<Span<'static>> {
    let (text, color) = match &state.notice.as_ref()?.saved {
        Ok(path) => (format!("wrote {}", escape::name(path)), Color::Green),
        Err(why) => (escape::name(why).into_owned(), Color::Yellow),
    };
    Some(Span::styled(
        format!("  {text}"),
        Style::new().fg(color).add_modifier(Modifier::BOLD),
    ))
}

/// The view's first finding (rule and summary), and how many more there are.
fn diagnosis_line(report: &Report) -> Line<'static> {
    let findings = &report.diagnosis.findings;
    let Some(first) = findings.first() else {
        return Line::from("diagnosis: no rule fired");
    };
    let more = match findings.len() {
        1 => String::new(),
        n => format!("  (+{} more: {})", n - 1, rules(&findings[1..])),
    };
    Line::from(vec![
        Span::styled(
            format!("diagnosis [{}] ", first.rule),
            Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!("{}{more}", escape::name(&first.summary))),
    ])
}

fn rules(findings: &[fdprof_profiler::analysis::Finding]) -> String {
    let names: Vec<&str> = findings.iter().map(|f| f.rule.name()).collect();
    names.join(", ")
}

/// Drops, the machine's steal and fdprof's own cost over the view's duration.
fn cost_line(report: &Report, duration_ns: u64) -> String {
    let d = &report.drops;
    let drops = if !d.known {
        "drops unknown".to_string()
    } else if d.none {
        "no drops".to_string()
    } else {
        format!("drops {} (figures are lower bounds)", d.total)
    };
    let c = &report.own_cost;
    // The programs' share is of the window their statistics were on: as run time per second.
    let programs = c
        .programs_cpu_share
        .map_or("-".into(), |s| format!("{}/s", human::duration_f(s * 1e9)));
    // Steal last: recordings played back (`--from`) have none to state.
    let steal = report
        .steal
        .as_ref()
        .map_or(String::new(), |s| format!("  {}", human::steal(Some(s))));
    format!(
        "{drops}  fdprof: collector {} CPU, programs {programs}{steal}",
        cpu(c.collector_cpu_ns, duration_ns),
    )
}
