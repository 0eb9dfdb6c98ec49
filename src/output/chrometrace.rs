//! Chrome's trace event JSON (Perfetto, chrome://tracing): each thread's
//! timeline turned into begin/end events by diffing each run's stack with the
//! one before it, so a function that stays on the stack is one slice.

use std::io::{self, Write};

use super::{Profile, EXPORTER};

/// Timeline run indices per thread, in time order.
pub(super) fn runs_by_thread(p: &Profile) -> Vec<Vec<u32>> {
    let mut by_thread = vec![Vec::new(); p.threads.len()];
    for (i, run) in p.runs.iter().enumerate() {
        by_thread[run.thread as usize].push(i as u32);
    }
    for runs in &mut by_thread {
        // Added in time order already; the stable sort only guards against
        // a sampler that hands in a thread's samples out of order.
        runs.sort_by_key(|&r| p.runs[r as usize].start_ns);
    }
    by_thread
}

struct Events<'a> {
    out: &'a mut dyn Write,
    first: bool,
}

impl Events<'_> {
    fn separator(&mut self) -> io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        Ok(())
    }

    fn metadata(&mut self, kind: &str, pid: i32, tid: u64, name: &str) -> io::Result<()> {
        self.separator()?;
        write!(
            self.out,
            "{{\"ph\":\"M\",\"name\":\"{kind}\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":"
        )?;
        serde_json::to_writer(&mut *self.out, name)?;
        self.out.write_all(b"}}")
    }

    fn slice(
        &mut self,
        p: &Profile,
        ph: char,
        frame: u32,
        ns: u64,
        pid: i32,
        tid: u64,
    ) -> io::Result<()> {
        self.separator()?;
        let info = &p.frames[frame as usize];
        // Microseconds, keeping the nanoseconds as decimals.
        write!(
            self.out,
            "{{\"ph\":\"{ph}\",\"ts\":{}.{:03},\"pid\":{pid},\"tid\":{tid},\"name\":",
            ns / 1000,
            ns % 1000
        )?;
        serde_json::to_writer(&mut *self.out, p.strings.get(info.label))?;
        if ph == 'B' {
            if let Some(file) = info.file {
                self.out.write_all(b",\"args\":{\"file\":")?;
                serde_json::to_writer(&mut *self.out, p.strings.get(file))?;
                if info.line > 0 {
                    write!(self.out, ",\"line\":{}", info.line)?;
                }
                self.out.write_all(b"}")?;
            }
        }
        self.out.write_all(b"}")
    }
}

pub(super) fn write(p: &Profile, out: &mut dyn Write, title: &str) -> io::Result<()> {
    out.write_all(b"{\"otherData\":{\"exporter\":")?;
    serde_json::to_writer(&mut *out, EXPORTER)?;
    out.write_all(b",\"title\":")?;
    serde_json::to_writer(&mut *out, title)?;
    out.write_all(b"},\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
    let mut ev = Events { out, first: true };
    for process in &p.processes {
        // Viewers show the pid next to the name already.
        let name = p.strings.get(process.cmdline);
        ev.metadata("process_name", process.pid, 0, name)?;
    }
    for (t, runs) in runs_by_thread(p).iter().enumerate() {
        let thread = &p.threads[t];
        // The OS thread id when known: it is what `top -H` and perf show.
        let tid = thread.os_tid.map_or(thread.ident, u64::from);
        let pid = thread.pid;
        let name = match thread.name {
            Some(n) => p.strings.get(n).to_string(),
            None => format!("thread {}", thread.display_id()),
        };
        ev.metadata("thread_name", pid, tid, &name)?;

        let mut open: &[u32] = &[];
        let mut prev_end = 0;
        for &r in runs {
            let run = &p.runs[r as usize];
            if run.after_gap {
                // The thread was not sampled for a while: end what was open
                // when its last sample ended, rather than stretch it.
                let end = prev_end.min(run.start_ns);
                for &f in open.iter().rev() {
                    ev.slice(p, 'E', f, end, pid, tid)?;
                }
                open = &[];
            }
            let stack = p.stacks.get(run.stack);
            let common = open.iter().zip(stack).take_while(|(a, b)| a == b).count();
            for &f in open[common..].iter().rev() {
                ev.slice(p, 'E', f, run.start_ns, pid, tid)?;
            }
            for &f in &stack[common..] {
                ev.slice(p, 'B', f, run.start_ns, pid, tid)?;
            }
            open = stack;
            prev_end = run.start_ns.saturating_add(run.dur_ns);
        }
        for &f in open.iter().rev() {
            ev.slice(p, 'E', f, prev_end, pid, tid)?;
        }
    }
    ev.out.write_all(b"\n]}")?;
    Ok(())
}
