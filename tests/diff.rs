//! `pyinspect diff BEFORE AFTER`: differential flame graphs of real and
//! hand-written recordings (ours, py-spy's and flamegraph.pl's collapsed
//! stacks, pprof), the table of changed shares, and every bad input.

mod common;
mod common_output;

use std::path::{Path, PathBuf};

use common::{assert_one_clean_error_line, fixture_path, interpreters, pyinspect, Output};

fn diff(dir: &Path, before: &Path, after: &Path, extra: &[&str]) -> (Output, PathBuf) {
    let svg = dir.join("diff.svg");
    let mut args = vec![
        "diff",
        before.to_str().unwrap(),
        after.to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    (pyinspect(&args), svg)
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// The fills of the frames whose title starts with `name`.
fn fills_of(svg: &str, name: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse_with_options(
        svg,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .expect("the SVG is XML");
    doc.descendants()
        .filter(|n| n.has_tag_name("g"))
        .filter(|g| {
            g.children()
                .find(|c| c.has_tag_name("title"))
                .and_then(|t| t.text())
                .is_some_and(|t| t.starts_with(name))
        })
        .filter_map(|g| g.children().find(|c| c.has_tag_name("rect")))
        .filter_map(|r| r.attribute("fill").map(String::from))
        .collect()
}

fn rgb(fill: &str) -> (u8, u8, u8) {
    let inner = fill.trim_start_matches("rgb(").trim_end_matches(')');
    let v: Vec<u8> = inner
        .split(',')
        .map(|x| x.trim().parse().unwrap())
        .collect();
    (v[0], v[1], v[2])
}

#[test]
fn colours_follow_growth_and_negate_shows_the_before_shape() {
    let dir = tempfile::tempdir().unwrap();
    // py-spy's collapsed lines (function (file:line)) before, flamegraph.pl's
    // plain ones after: the same functions, in both styles' syntax.
    let before = write(
        dir.path(),
        "before.txt",
        b"<module> (app.py:9);grows (app.py:3) 100\n<module> (app.py:9);shrinks (app.py:6) 300\n<module> (app.py:9);goes (app.py:7) 100\n",
    );
    let after = write(
        dir.path(),
        "after.txt",
        b"<module> (app.py:9);grows (app.py:3) 900\n<module> (app.py:9);shrinks (app.py:6) 100\n",
    );
    let (out, svg) = diff(dir.path(), &before, &after, &[]);
    out.assert_success();
    let text = std::fs::read_to_string(&svg).unwrap();
    common_output::svg_text(text.as_bytes());
    let grows = rgb(&fills_of(&text, "grows")[0]);
    let shrinks = rgb(&fills_of(&text, "shrinks")[0]);
    assert!(grows.0 > grows.2, "grew: red {grows:?}");
    assert!(shrinks.2 > shrinks.0, "shrank: blue {shrinks:?}");
    // The after shape: what went away is not drawn.
    assert!(fills_of(&text, "goes").is_empty());
    // The table: the biggest change of own share first, signed.
    let rows: Vec<&str> = out.stdout.lines().collect();
    assert!(rows[0].starts_with("FUNCTION"), "{}", out.stdout);
    assert!(rows[1].starts_with("grows (app.py:3)"), "{}", out.stdout);
    assert!(
        rows[1].contains("20.00%") && rows[1].contains("90.00%"),
        "{}",
        rows[1]
    );
    assert!(rows[1].contains("+70.00%"), "{}", rows[1]);
    assert!(
        out.stdout.contains("-50.00%"),
        "shrinks: 60% → 10%\n{}",
        out.stdout
    );
    assert!(
        out.stderr.contains("wrote differential flame graph"),
        "{}",
        out.stderr
    );

    // --negate: the before shape, so what went away is drawn, in blue.
    let (out, svg) = diff(dir.path(), &before, &after, &["--negate", "--top", "0"]);
    out.assert_success();
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    let text = std::fs::read_to_string(&svg).unwrap();
    let goes = rgb(&fills_of(&text, "goes")[0]);
    assert!(goes.2 > goes.0, "went away: blue {goes:?}");
    let grows = rgb(&fills_of(&text, "grows")[0]);
    assert!(grows.0 > grows.2, "still red: {grows:?}");
}

/// Two real recordings: a raw one of one program before, a pprof one of
/// another after; the table says which functions came and went.
#[test]
fn real_recordings_raw_and_pprof() {
    let interp = interpreters()
        .iter()
        .find(|i| i.label.starts_with("pyenv 3.12"))
        .expect("pyenv 3.12 is required");
    let dir = tempfile::tempdir().unwrap();
    let python = interp.python.to_str().unwrap();
    let rec = |format: &str, script: &str, name: &str| -> PathBuf {
        let path = dir.path().join(name);
        let script = fixture_path(script);
        let out = pyinspect(&[
            "record",
            "-f",
            format,
            "-r",
            "500",
            "-o",
            path.to_str().unwrap(),
            "--",
            python,
            script.to_str().unwrap(),
            "2",
        ]);
        out.assert_success();
        path
    };
    let before = rec("raw", "record_threads.py", "before.txt");
    let after = rec("pprof", "record_hot.py", "after.pb.gz");
    let (out, svg) = diff(dir.path(), &before, &after, &["--top", "50"]);
    out.assert_success();
    let text = common_output::svg_text(&std::fs::read(&svg).unwrap());
    assert!(text.contains("hot_function"), "{text}");
    let line = |f: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(f))
            .unwrap_or_else(|| panic!("{f} not in\n{}", out.stdout))
            .to_string()
    };
    assert!(line("hot_function").contains('+'), "{}", out.stdout);
    assert!(line("busy_worker").contains("-"), "{}", out.stdout);
}

#[test]
fn bad_inputs_are_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = write(d, "good.txt", b"a;b 3\n");
    let cases: Vec<(PathBuf, &str)> = vec![
        (d.join("missing.txt"), "cannot read"),
        (d.to_path_buf(), "is a directory"),
        (write(d, "empty.txt", b""), "it is empty"),
        (write(d, "text.txt", b"hello world\n"), "collapsed stacks"),
        (write(d, "nocount.txt", b"a;b 3\na;b\n"), "line 2"),
        (write(d, "zero.txt", b"a;b 0\n"), "no samples"),
        (
            write(d, "binary.bin", &[0xff, 0x00, 0x13, 0x37, 0xfe]),
            "neither",
        ),
        (write(d, "bad.gz", &[0x1f, 0x8b, 0x08, 0x00, 0x01]), "gzip"),
    ];
    for (bad, needle) in &cases {
        for (before, after) in [(bad, &good), (&good, bad)] {
            let (out, svg) = diff(d, before, after, &[]);
            let line = assert_one_clean_error_line(&out);
            assert!(line.contains(needle), "{}: {line}", bad.display());
            assert!(!svg.exists(), "an output file was left behind");
        }
    }
    // An output path that is a directory.
    let out = pyinspect(&[
        "diff",
        good.to_str().unwrap(),
        good.to_str().unwrap(),
        "-o",
        d.to_str().unwrap(),
    ]);
    let line = assert_one_clean_error_line(&out);
    assert!(line.contains("directory"), "{line}");
    // Missing arguments and unknown flags: clap's one line.
    let out = pyinspect(&["diff", good.to_str().unwrap()]);
    assert_one_clean_error_line(&out);
    let out = pyinspect(&["diff", "--top", "x", "a", "b"]);
    assert_one_clean_error_line(&out);
}
