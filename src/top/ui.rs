//! Drawing the view with ratatui. Pure: reads the view and the interned
//! locations, never the target.

use super::aggregate::{Aggregator, Grouping};
use super::view::{SortBy, TargetState, View};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;
use std::time::Duration;

/// Below this the tables cannot show a function name usefully.
pub(crate) const MIN_WIDTH: u16 = 50;
pub(crate) const MIN_HEIGHT: u16 = 10;
/// Below this height the threads panel is hidden to leave room for functions.
const THREADS_MIN_HEIGHT: u16 = 20;

pub(crate) fn draw(f: &mut Frame, v: &View, agg: &Aggregator) {
    let area = f.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let msg = format!(
            "terminal too small ({}x{}): pyinspect top needs at least {}x{}. q quits.",
            area.width, area.height, MIN_WIDTH, MIN_HEIGHT
        );
        f.render_widget(Paragraph::new(msg).wrap(Wrap { trim: true }), area);
        return;
    }
    let threads_shown = v.show_threads && area.height >= THREADS_MIN_HEIGHT;
    // Border, header row and the threads themselves, up to a third of the screen.
    let threads_height = if threads_shown {
        (v.snapshot.threads.len() as u16 + 3).clamp(4, area.height / 3)
    } else {
        0
    };
    let [header, threads, functions, footer] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Length(threads_height),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_header(f, header, v);
    if threads_shown {
        draw_threads(f, threads, v);
    }
    draw_functions(f, functions, v, agg);
    f.render_widget(
        Paragraph::new(
            "q quit  ? help  1-4 sort  l line/function  r reset  space pause  t threads  \
             ↑↓ Enter filter by thread",
        )
        .style(Style::new().add_modifier(Modifier::DIM)),
        footer,
    );
    if v.show_help {
        draw_help(f, area);
    }
}

fn draw_header(f: &mut Frame, area: Rect, v: &View) {
    let t = &v.snapshot.totals;
    let mut first = vec![
        Span::styled("pyinspect top", Style::new().bold()),
        Span::raw(if v.root_pid == 0 {
            "  every Python process on the host (--all)".to_string()
        } else {
            format!("  process {}: {}", v.root_pid, v.cmdline)
        }),
    ];
    if !v.python_version.is_empty() {
        first.push(Span::raw(format!("  Python {}", v.python_version)));
    }
    if v.processes > 1 {
        first.push(Span::raw(format!("  ({} processes)", v.processes)));
    }
    let second = Line::from(format!(
        "Rate {}/s  Samples {} ({} thread samples)  Errors {}  Late {}  GIL {:.1}%  Active {:.1}%  Threads {}",
        fmt_rate(v.rate),
        t.ticks,
        t.thread_samples,
        t.errors,
        t.late,
        t.window.gil_pct(),
        t.window.active_pct(),
        v.snapshot.threads.len(),
    ));
    let mut third: Vec<Span> = Vec::new();
    match &v.state {
        TargetState::Sampling if v.paused => third.push(Span::styled(
            "PAUSED (sampling continues; space resumes)",
            Style::new().fg(Color::Yellow).bold(),
        )),
        TargetState::Sampling => third.push(Span::styled("sampling", Style::new().green())),
        TargetState::Ended(why) => third.push(Span::styled(
            format!("{why}: showing the last data; q quits"),
            Style::new().fg(Color::Red).bold(),
        )),
    }
    if let Some(i) = v.filter {
        let who = v
            .snapshot
            .threads
            .iter()
            .find(|t| t.index == i)
            .map(thread_label)
            .unwrap_or_else(|| "an exited thread".to_string());
        third.push(Span::styled(
            format!("  filter: {who} (Esc clears)"),
            Style::new().fg(Color::Cyan),
        ));
    }
    // Many late samples make the percentages less trustworthy: say so.
    if t.ticks > 10 && t.late * 10 > t.ticks {
        third.push(Span::styled(
            format!(
                "  behind in sampling (up to {}); try a lower --rate",
                fmt_duration(t.max_late)
            ),
            Style::new().fg(Color::Red),
        ));
    } else if let Some(e) = &t.last_error {
        third.push(Span::styled(
            format!("  last error: {e}"),
            Style::new().fg(Color::Yellow),
        ));
    }
    let text = vec![Line::from(first), second, Line::from(third)];
    f.render_widget(Paragraph::new(text), area);
}

fn thread_label(t: &super::view::ThreadRow) -> String {
    let id = match t.os_tid {
        Some(tid) => tid.to_string(),
        None => format!("0x{:x}", t.thread_id),
    };
    match &t.name {
        Some(n) => format!("thread {id} \"{n}\""),
        None => format!("thread {id}"),
    }
}

fn draw_threads(f: &mut Frame, area: Rect, v: &View) {
    let multi = v.processes > 1;
    let mut head = vec![
        "Thread",
        "TID",
        "S",
        "CPU%",
        "vcsw/s",
        "ivcsw/s",
        "GIL%",
        "Waiting for",
        "Now in",
    ];
    let mut widths = vec![
        Constraint::Length(16),
        Constraint::Length(8),
        Constraint::Length(2),
        Constraint::Length(6),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(6),
        Constraint::Length(24),
        Constraint::Fill(1),
    ];
    if multi {
        head.insert(0, "PID");
        widths.insert(0, Constraint::Length(8));
    }
    let opt = |x: Option<f64>, digits: usize| match x {
        Some(x) => format!("{x:.digits$}"),
        None => "-".to_string(),
    };
    let rows = v.snapshot.threads.iter().map(|t| {
        let marker = if v.filter == Some(t.index) { "*" } else { "" };
        let r = t.rates.as_ref();
        let mut cells = vec![
            format!("{marker}{}", t.name.as_deref().unwrap_or("-")),
            match t.os_tid {
                Some(tid) => tid.to_string(),
                None => format!("{:x}", t.thread_id),
            },
            r.map_or("-".into(), |r| r.state.to_string()),
            opt(r.and_then(|r| r.cpu_pct), 1),
            opt(r.and_then(|r| r.voluntary_per_s), 0),
            opt(r.and_then(|r| r.involuntary_per_s), 0),
            format!("{:.1}", t.gil_pct),
            t.wait.clone().unwrap_or_default(),
            t.current.clone().unwrap_or_default(),
        ];
        if multi {
            cells.insert(0, t.pid.to_string());
        }
        Row::new(cells)
    });
    let table = Table::new(rows, widths)
        .header(Row::new(head).style(Style::new().bold().reversed()))
        .row_highlight_style(Style::new().fg(Color::Black).bg(Color::Cyan))
        .block(
            Block::new()
                .borders(Borders::BOTTOM)
                .title_bottom(Line::from(" threads (t hides) ").dim()),
        );
    let mut state = TableState::default().with_selected(Some(v.selected));
    f.render_stateful_widget(table, area, &mut state);
}

fn draw_functions(f: &mut Frame, area: Rect, v: &View, agg: &Aggregator) {
    let title = |s: SortBy, name: &str| {
        if v.sort == s {
            Cell::from(format!("{name}▼")).style(Style::new().bold().underlined())
        } else {
            Cell::from(name.to_string())
        }
    };
    let func_title = match v.grouping {
        Grouping::Line => "Function (file:line)",
        Grouping::Function => "Function (file)",
    };
    let header = Row::new(vec![
        title(SortBy::OwnPct, "%Own"),
        title(SortBy::TotalPct, "%Total"),
        title(SortBy::OwnTime, "OwnTime"),
        title(SortBy::TotalTime, "TotalTime"),
        Cell::from(func_title),
    ])
    .style(Style::new().reversed());
    // Only the visible rows are formatted.
    let visible = area.height.saturating_sub(1) as usize;
    let rows = v
        .snapshot
        .rows
        .iter()
        .skip(v.scroll)
        .take(visible)
        .map(|r| {
            Row::new(vec![
                format!("{:6.2}%", r.own_pct),
                format!("{:6.2}%", r.total_pct),
                fmt_duration(r.own_time),
                fmt_duration(r.total_time),
                agg.location(r.location).to_string(),
            ])
        });
    let widths = [
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Fill(1),
    ];
    f.render_widget(Table::new(rows, widths).header(header), area);
}

fn draw_help(f: &mut Frame, area: Rect) {
    let lines = [
        "1 2 3 4    sort by %Own, %Total, OwnTime, TotalTime",
        "l          by line / by function",
        "r          reset the statistics",
        "space      pause the display (sampling continues)",
        "t          show / hide the threads panel",
        "↑ ↓        select a thread (function table rows without the panel)",
        "Enter      show only the selected thread's functions (again: all)",
        "PgUp PgDn  scroll the function table",
        "Esc        clear the filter, close help, or quit",
        "q Ctrl-C   quit",
        "",
        "%Own: share of thread samples in the last second with this",
        "function innermost; %Total: with it anywhere on the stack",
        "(counted once per sample under recursion). Times: since start.",
        "GIL: share of samples where a thread held the GIL; Active:",
        "where a thread was running. CPU%, vcsw/s, ivcsw/s: from",
        "/proc (one core = 100%; voluntary / involuntary switches).",
    ];
    let w = (lines.iter().map(|l| l.chars().count()).max().unwrap_or(0) as u16 + 4).min(area.width);
    let h = (lines.len() as u16 + 2).min(area.height);
    let r = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines.iter().map(|l| Line::from(*l)).collect::<Vec<_>>())
            .block(Block::bordered().title(" help (? or Esc closes) ")),
        r,
    );
}

fn fmt_rate(r: f64) -> String {
    if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r}")
    }
}

/// Seconds with two decimals up to 100 s, then whole seconds, then h:mm:ss.
pub(crate) fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 100.0 {
        format!("{s:.2}s")
    } else if s < 3600.0 {
        format!("{s:.0}s")
    } else {
        let s = d.as_secs();
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::{Frame as StackFrame, ThreadStack, ThreadStatus};
    use crate::top::aggregate::CountFilter;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use std::collections::HashMap;

    fn screen(w: u16, h: u16, v: &View, a: &Aggregator) -> String {
        let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
        term.draw(|f| draw(f, v, a)).unwrap();
        let buf = term.backend().buffer().clone();
        let mut out = String::new();
        for y in 0..h {
            for x in 0..w {
                out.push_str(buf[(x, y)].symbol());
            }
            out.push('\n');
        }
        out
    }

    #[test]
    fn draws_tables_and_degrades_when_small() {
        let mut a = Aggregator::new(CountFilter::default());
        let t = ThreadStack {
            thread_id: 5,
            os_thread_id: Some(4321),
            name: Some("worker".into()),
            interpreter: 0,
            status: ThreadStatus::Active,
            holds_gil: true,
            frames: vec![StackFrame::python("hot_loop", "/x/top_hot.py", 12)],
            truncated: None,
            native_entry: None,
            name_source: None,
            wait: None,
            asyncio: None,
        };
        a.begin_tick(0, Duration::ZERO, &[]);
        a.add_threads([(9, &t)], Duration::from_millis(10), &mut |f| {
            f.rsplit('/').next().unwrap().to_string()
        });
        a.roll_window();
        let mut v = View::new(9, "python top_hot.py".into(), 100.0);
        v.python_version = "3.12.1".into();
        v.rebuild(&a, &HashMap::new());
        let s = screen(120, 30, &v, &a);
        assert!(s.contains("process 9: python top_hot.py"), "{s}");
        assert!(s.contains("Python 3.12.1"), "{s}");
        assert!(s.contains("100.00%"), "{s}");
        assert!(s.contains("hot_loop (top_hot.py:12)"), "{s}");
        assert!(s.contains("worker"), "{s}");
        assert!(s.contains("4321"), "{s}");
        v.state = TargetState::Ended("process 9 exited".into());
        v.show_help = true;
        let s = screen(120, 30, &v, &a);
        assert!(s.contains("process 9 exited: showing the last data"), "{s}");
        assert!(s.contains("help"), "{s}");
        let s = screen(30, 5, &v, &a);
        assert!(s.contains("terminal too"), "{s}");
        // Short but wide enough: the function table, without the threads panel.
        v.show_help = false;
        let s = screen(80, 12, &v, &a);
        assert!(s.contains("hot_loop") && !s.contains("vcsw/s"), "{s}");
    }

    #[test]
    fn durations() {
        assert_eq!(fmt_duration(Duration::from_millis(1234)), "1.23s");
        assert_eq!(fmt_duration(Duration::from_secs(512)), "512s");
        assert_eq!(fmt_duration(Duration::from_secs(3723)), "1:02:03");
    }
}
