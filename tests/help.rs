//! The binary's help and README agree: every format, mode and shell the
//! binary takes is listed by `--help`, `record --help` and README's tables
//! alike, and every long flag of each command's `--help` is in README's
//! table for that command (and every flag README's tables give exists).

mod common;

use common::pyinspect;
use std::collections::BTreeSet;

/// The commands `pyinspect --help` lists (but `help`).
fn commands(top: &str) -> Vec<String> {
    top.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// README's `## ` heading for a command: the one that names it.
fn heading_of(readme: &str, command: &str) -> String {
    readme
        .lines()
        .filter(|l| l.starts_with("## "))
        .find(|l| l[3..].split([' ', '`']).any(|w| w == command))
        .unwrap_or_else(|| panic!("README has no section for {command}"))
        .to_string()
}

fn help(args: &[&str]) -> String {
    let out = pyinspect(args);
    out.assert_success();
    out.stdout
}

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

/// The text of README's section `heading` (a `## ` or `### ` line), to the
/// next heading of the same level or above.
fn section<'a>(readme: &'a str, heading: &str) -> &'a str {
    let level = heading.split(' ').next().unwrap().len();
    let start = readme
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("README has no {heading:?}"))
        + heading.len()
        + 2;
    let rest = &readme[start..];
    let end = rest
        .lines()
        .scan(0, |at, l| {
            let here = *at;
            *at += l.len() + 1;
            Some((here, l))
        })
        .find(|(_, l)| {
            let hashes = l.chars().take_while(|c| *c == '#').count();
            hashes > 0 && hashes <= level && l[hashes..].starts_with(' ')
        })
        .map(|(at, _)| at)
        .unwrap_or(rest.len());
    &rest[..end]
}

/// The table rows of a README text.
fn rows(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("|---"))
}

/// The words in backticks of `text` that are names (lowercase letters only).
fn names_in(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase()))
        .map(str::to_string)
        .collect()
}

/// README's table row for `flag` in `text` (its first cell names it).
fn row<'a>(text: &'a str, flag: &str) -> &'a str {
    rows(text)
        .find(|r| r.split('|').nth(1).is_some_and(|c| c.contains(flag)))
        .unwrap_or_else(|| panic!("README has no row for {flag} in:\n{text}"))
}

/// The values clap lists for `flag` in a long `--help`: a "Possible
/// values:" block (`- name: …` lines) or `[possible values: a, b]`.
fn possible_values(help: &str, flag: &str) -> BTreeSet<String> {
    let start = help
        .lines()
        .position(|l| {
            let t = l.trim_start();
            t.starts_with(&format!("{flag} ")) || t.contains(&format!(", {flag} "))
        })
        .unwrap_or_else(|| panic!("no {flag} in:\n{help}"));
    let mut values = BTreeSet::new();
    for (i, l) in help.lines().skip(start).enumerate() {
        let t = l.trim();
        // The next option ends this one's text.
        if i > 0 && t.starts_with('-') && !t.starts_with("- ") {
            break;
        }
        if let Some(v) = t.strip_prefix("- ").filter(|_| i > 0) {
            values.insert(v.split(':').next().unwrap().trim().to_string());
        }
        if let Some((_, v)) = t.split_once("[possible values: ") {
            let v = v.split(']').next().unwrap();
            values.extend(v.split(", ").map(|v| v.trim().to_string()));
        }
    }
    assert!(!values.is_empty(), "{flag} lists no values in:\n{help}");
    values
}

/// The names after the colon of a command's one-line description in the
/// top-level `--help`: "…: a, b or c".
fn listed_in_about(top: &str, command: &str) -> BTreeSet<String> {
    let line = top
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{command} ")))
        .unwrap_or_else(|| panic!("no {command} in:\n{top}"));
    let (_, list) = line
        .split_once(": ")
        .unwrap_or_else(|| panic!("{command}'s description lists nothing: {line:?}"));
    list.split(", ")
        .flat_map(|w| w.split(" or "))
        .map(|w| w.trim().to_string())
        .collect()
}

/// The long flags a command's `--help` defines (at the start of an option line).
fn long_flags(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter_map(|l| {
            let t = l.trim_start();
            let t = match t.strip_prefix('-') {
                Some(short) if !short.starts_with('-') => t.split_once(", ")?.1,
                _ => t,
            };
            let name: String = t
                .strip_prefix("--")?
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            Some(format!("--{name}"))
        })
        .filter(|f| f != "--help" && f != "--version")
        .collect()
}

/// The long flags README's table rows name in their first cell.
fn readme_flags(text: &str) -> BTreeSet<String> {
    rows(text)
        .filter_map(|r| r.split('|').nth(1))
        .flat_map(|cell| {
            cell.split(['`', ' ', ',', '/'])
                .filter(|w| w.starts_with("--") && w.len() > 2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn formats_modes_and_shells_agree_in_help_and_readme() {
    let readme = readme();
    let top = help(&["--help"]);
    let record = help(&["record", "--help"]);
    let record_short = help(&["record", "-h"]);
    let record_md = section(&readme, "## record");

    let formats = possible_values(&record, "--format");
    for f in ["flamegraph", "gecko", "html", "heatmap", "pprof"] {
        assert!(formats.contains(f), "record --help lacks {f}: {formats:?}");
    }
    let mut problems = Vec::new();
    let mut same = |what: &str, got: BTreeSet<String>, want: &BTreeSet<String>| {
        if &got != want {
            problems.push(format!("{what}: {got:?}, the binary takes {want:?}"));
        }
    };
    same(
        "record -h's --format",
        possible_values(&record_short, "--format"),
        &formats,
    );
    same(
        "pyinspect --help's record line",
        listed_in_about(&top, "record"),
        &formats,
    );
    same(
        "record --help's own description",
        listed_in_about(
            &format!("record {}", record.lines().next().unwrap()),
            "record",
        ),
        &formats,
    );
    same(
        "README's record table, --format",
        names_in(row(record_md, "--format")),
        &formats,
    );
    same(
        "README's Formats table",
        rows(section(&readme, "### Formats"))
            .filter_map(|r| r.split('|').nth(1))
            .flat_map(names_in)
            .filter(|n| n != "format")
            .collect(),
        &formats,
    );

    let modes = possible_values(&record, "--mode");
    same(
        "README's record table, --mode",
        names_in(row(record_md, "--mode")),
        &modes,
    );
    let intro = readme.split("\n## ").next().unwrap();
    let intro_modes = intro
        .split('`')
        .find_map(|w| w.strip_prefix("--mode "))
        .expect("README's introduction names --mode's values");
    same(
        "README's introduction, --mode",
        intro_modes.split('|').map(str::to_string).collect(),
        &modes,
    );
    for (command, md) in [("record", record_md), ("top", section(&readme, "## top"))] {
        let text = help(&[command, "--help"]);
        same(
            &format!("README's {command} table, --async-mode"),
            names_in(row(md, "--async-mode")),
            &possible_values(&text, "--async-mode"),
        );
    }

    let completions = help(&["completions", "--help"]);
    let shells = possible_values(&completions, "<SHELL>");
    same(
        "pyinspect --help's completions line",
        listed_in_about(&top, "completions"),
        &shells,
    );
    let shells_md = section(&readme, "## Shell completions");
    let paragraph = shells_md
        .split("\n\n")
        .find(|p| p.contains("`completions SHELL`"))
        .expect("README says which shells completions takes");
    same("README's Shell completions", names_in(paragraph), &shells);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_flag_in_help_is_in_readme_and_back() {
    let readme = readme();
    let top = help(&["--help"]);
    let global = long_flags(&top);
    let everywhere = readme_flags(&readme);
    let commands = commands(&top);
    for c in ["dump", "record", "top", "diff", "completions"] {
        assert!(commands.iter().any(|x| x == c), "no {c} in:\n{top}");
    }
    let mut problems = Vec::new();
    for f in &global {
        if !everywhere.contains(f) {
            problems.push(format!("{f} (global) is in no README table"));
        }
    }
    for command in &commands {
        let flags = long_flags(&help(&[command, "--help"]));
        let md = readme_flags(section(&readme, &heading_of(&readme, command)));
        for f in flags.difference(&global) {
            if !md.contains(f) {
                problems.push(format!("{command} {f} is not in README's {command} table"));
            }
        }
        for f in md.difference(&flags) {
            problems.push(format!(
                "README's {command} table gives {f}, which {command} --help does not have"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
