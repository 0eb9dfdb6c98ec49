//! `record -f html` opened in a real headless browser (Debian's chromium,
//! installed by .ci/chromium): the page's own script must build the flame
//! graph, the thread list and the top-functions table from the inline data,
//! with nothing fetched, and the screenshot must show the flame graph.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

mod common;
use common::{for_each_interpreter, run_command, Interpreter};

const CHROMIUM: &str = "/usr/bin/chromium";

/// Runs chromium headless on `url` with a fresh profile directory and
/// nothing that talks to the network; returns stdout.
fn chromium(url: &str, extra: &[&str], tmp: &Path) -> String {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: run .ci/chromium"
    );
    let profile = tempfile::tempdir_in(tmp).unwrap();
    let mut c = Command::new(CHROMIUM);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        "--window-size=1200,900",
        "--virtual-time-budget=5000",
    ]);
    c.arg(format!("--user-data-dir={}", profile.path().display()));
    c.args(extra).arg(url);
    let out = run_command(c, Duration::from_secs(120));
    assert!(out.status.success(), "chromium failed\n{}", out.describe());
    out.stdout
}

fn record_html(interp: &Interpreter, out: &Path) {
    let script = common::fixture_path("record_threads.py");
    let r = common::pyinspect(&[
        "record",
        "-f",
        "html",
        "-r",
        "200",
        "-o",
        out.to_str().unwrap(),
        "--",
        interp.python.to_str().unwrap(),
        script.to_str().unwrap(),
        "1",
    ]);
    r.assert_success();
}

#[test]
fn html_profile_renders_in_chromium() {
    for_each_interpreter(
        "html_profile_renders_in_chromium",
        |i| i.label.starts_with("pyenv 3.12"),
        |interp| {
            let tmp = tempfile::tempdir().unwrap();
            let page = tmp.path().join("profile.html");
            record_html(interp, &page);
            let url = format!("file://{}", page.display());

            // The DOM after the page's script ran.
            let dom = chromium(&url, &["--dump-dom"], tmp.path());
            assert!(
                dom.contains("data-rendered=\"yes\""),
                "the script did not finish"
            );
            let nodes = dom.matches("class=\"fg-node").count();
            assert!(nodes >= 5, "{nodes} flame graph nodes");
            for name in ["busy_main", "busy_worker"] {
                assert!(dom.contains(name), "{name} not drawn");
            }
            // The thread selector lists the sampled threads, the table has rows.
            assert!(dom.matches("<option").count() >= 3, "thread options");
            let top = &dom[dom.find("id=\"top\"").expect("the top table")..];
            assert!(top.matches("<tr").count() >= 4, "top-functions rows");

            // A search from the link highlights frames and says its share.
            let dom = chromium(&format!("{url}#search=busy_w"), &["--dump-dom"], tmp.path());
            assert!(dom.contains("fg-node match"), "no frame highlighted");
            let matched = &dom[dom.find("id=\"matched\"").unwrap()..];
            assert!(matched[..200].contains("matched "), "{}", &matched[..200]);

            // The screenshot holds the flame graph's warm colours.
            let shot = tmp.path().join("shot.png");
            chromium(
                &url,
                &[&format!("--screenshot={}", shot.display())],
                tmp.path(),
            );
            let decoder = png::Decoder::new(std::fs::File::open(&shot).unwrap());
            let mut reader = decoder.read_info().unwrap();
            let mut buf = vec![0; reader.output_buffer_size()];
            let info = reader.next_frame(&mut buf).unwrap();
            let channels = info.color_type.samples();
            assert!(channels >= 3, "{:?}", info.color_type);
            let warm = buf[..info.buffer_size()]
                .chunks(channels)
                .filter(|p| p[0] > 200 && (60..235).contains(&p[1]) && p[2] < 120)
                .count();
            let pixels = (info.width * info.height) as usize;
            assert!(
                warm > pixels / 100,
                "{warm} flame-coloured pixels of {pixels}"
            );
        },
    );
}
