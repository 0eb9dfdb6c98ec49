//! `pyinspect dump`.

pub struct DumpOptions {
    pub pid: i32,
    pub json: bool,
    pub locals: bool,
    pub nonblocking: bool,
    pub subprocesses: bool,
    pub native: bool,
    pub native_all: bool,
}

pub fn run(_opts: &DumpOptions) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
