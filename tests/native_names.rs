//! Native frames are named short wherever a person reads them, and JSON
//! keeps the whole signature: `dump --native` text and JSON on every
//! interpreter of the matrix; `record --native`'s flame graph labels and
//! collapsed stacks, and `diff`'s table, on a few. (`top`: tests/top.rs.)
//!
//! The fixture (python_fixtures/native/names.py) parks a thread in C++
//! (names_fixture.cpp) whose demangled names run to hundreds of characters,
//! as PyTorch's do: a kernel wrapper templated on a whole function type, a
//! std::function holding a lambda, an operator(), an anonymous namespace.

mod common;

use common::{for_each_interpreter, names_fixture_lib, pyinspect, Fixture, Interpreter};
use serde_json::Value;

/// The fixture's frames as shown, innermost first, each with a piece of
/// its whole signature as JSON's `signature` carries it.
const FRAMES: &[(&str, &str)] = &[
    (
        "pyinspect_fixture::(anonymous namespace)::addmm_impl_cpu_",
        "pyinspect_fixture::(anonymous namespace)::addmm_impl_cpu_(std::vector<double, std::allocator<double> >&, std::vector<double, std::allocator<double> > const&, long, int, int)",
    ),
    (
        "names_block::{lambda#1}::operator()",
        "names_block::{lambda(std::vector<double, std::allocator<double> > const&, long)#1}::operator()(std::vector<double, std::allocator<double> > const&, long) const",
    ),
    (
        "std::_Function_handler<…>::_M_invoke",
        "std::_Function_handler<long (std::vector<double, std::allocator<double> > const&, long), names_block::{lambda(",
    ),
    (
        "pyinspect_fixture::detail::WrapFunctionIntoFunctor_<…>::operator()",
        "pyinspect_fixture::detail::WrapFunctionIntoFunctor_<std::function<long (std::vector<double, std::allocator<double> > const&, long)>",
    ),
    (
        "pyinspect_fixture::wrap_kernel_functor_unboxed_<…>::call<std::vector<…>&, long>",
        "pyinspect_fixture::wrap_kernel_functor_unboxed_<pyinspect_fixture::detail::WrapFunctionIntoFunctor_<",
    ),
    ("names_block", "names_block"),
];

fn spawn(interp: &Interpreter) -> Fixture {
    let dir = names_fixture_lib().to_str().unwrap().to_string();
    Fixture::spawn(interp, "native/names.py", &[&dir])
}

/// The text block of thread `tid` in a text dump.
fn thread_block(text: &str, tid: u64) -> String {
    let head = format!("Thread {tid} ");
    text.split("\n\n")
        .find(|b| b.trim_start().starts_with(&head))
        .unwrap_or_else(|| panic!("no thread {tid} in:\n{text}"))
        .to_string()
}

/// Where `names` occur in `have`, in order (each after the one before).
fn in_order(have: &[String], names: &[&str]) -> Result<(), String> {
    let mut from = 0;
    for n in names {
        match have[from..].iter().position(|h| h == n) {
            Some(i) => from += i + 1,
            None => return Err(format!("{n:?} missing (or out of order) in {have:#?}")),
        }
    }
    Ok(())
}

#[test]
fn dump_shows_short_names_and_json_the_signatures() {
    for_each_interpreter(
        "dump_shows_short_names_and_json_the_signatures",
        |_| true,
        |interp| {
            let fx = spawn(interp);
            let tid = fx.ready["tid"].as_u64().expect("tid");
            let pid = fx.pid.to_string();

            // JSON: `function` short, `signature` whole.
            let out = pyinspect(&["dump", "--native", "--json", "--pid", &pid]);
            out.assert_success();
            let doc = out.json_lines().remove(0);
            let thread = doc["threads"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["os_thread_id"].as_u64() == Some(tid))
                .unwrap_or_else(|| panic!("{}: no thread {tid}: {doc:#}", fx.label))
                .clone();
            let frames: Vec<&Value> = thread["frames"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["module"] == "libnames.so")
                .collect();
            let names: Vec<String> = frames
                .iter()
                .map(|f| f["function"].as_str().unwrap().to_string())
                .collect();
            let shown: Vec<&str> = FRAMES.iter().map(|f| f.0).collect();
            if let Err(e) = in_order(&names, &shown) {
                panic!("{}: JSON functions: {e}", fx.label);
            }
            for (short, whole) in FRAMES {
                let f = frames.iter().find(|f| f["function"] == *short).unwrap();
                let sig = f["signature"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{}: {short} has no signature: {f:#}", fx.label));
                assert!(
                    sig.starts_with(whole),
                    "{}: {short}: signature {sig:?}",
                    fx.label
                );
            }
            for f in &frames {
                let n = f["function"].as_str().unwrap();
                assert!(
                    !n.contains("std::allocator") && !n.contains("const&") && n.len() < 100,
                    "{}: not short: {n:?}",
                    fx.label
                );
            }
            assert_eq!(
                thread["native_entry"], "names_block (libnames.so)",
                "{}",
                fx.label
            );

            // Text: the short names, and no argument list anywhere.
            let out = pyinspect(&["dump", "--native", "--pid", &pid]);
            out.assert_success();
            let block = thread_block(&out.stdout, tid);
            let lines: Vec<String> = block
                .lines()
                .filter(|l| l.ends_with("[libnames.so]") || l.ends_with("[libnames.so] (inlined)"))
                .map(|l| l.trim().split(" (").next().unwrap().to_string())
                .collect();
            if let Err(e) = in_order(&lines, &shown) {
                panic!("{}: text: {e}\n{block}", fx.label);
            }
            assert!(
                !block.contains("std::allocator") && !block.contains("const&"),
                "{}: a signature in the text:\n{block}",
                fx.label
            );

            // --full-names: the whole signatures in text.
            let out = pyinspect(&["dump", "--native", "--full-names", "--pid", &pid]);
            out.assert_success();
            let block = thread_block(&out.stdout, tid);
            for (_, whole) in FRAMES {
                assert!(
                    block.contains(whole),
                    "{}: --full-names lacks {whole:?}:\n{block}",
                    fx.label
                );
            }
        },
    );
}

/// The labels of an SVG flame graph (its frames' `<title>`s).
fn svg_titles(svg: &str) -> Vec<String> {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(svg, opts).expect("the SVG is XML");
    doc.descendants()
        .filter(|n| n.has_tag_name("title"))
        .filter_map(|t| t.text().map(str::to_string))
        .collect()
}

/// Record the parked thread (`--idle`: it is off the CPU) for a second.
fn record(pid: &str, format: &str, out: &std::path::Path, extra: &[&str]) {
    let mut args = vec![
        "record", "--native", "--idle", "-d", "1.5", "-r", "50", "-f", format, "-o",
    ];
    let path = out.to_str().unwrap();
    args.push(path);
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--pid", pid]);
    pyinspect(&args).assert_success();
}

#[test]
fn record_labels_and_diff_use_short_names() {
    // pyenv's 2.7 and 3.12, sid's 3.14: the old and new frame layouts.
    let select = |i: &Interpreter| {
        !i.debug
            && ((i.label.starts_with("pyenv") && matches!(i.version, (2, 7) | (3, 12)))
                || (i.label.starts_with("sid") && i.version == (3, 14)))
    };
    for_each_interpreter("record_labels_and_diff_use_short_names", select, |interp| {
        let fx = spawn(interp);
        let pid = fx.pid.to_string();
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        record(&pid, "flamegraph", &p("names.svg"), &[]);
        record(&pid, "raw", &p("names.txt"), &[]);
        record(&pid, "raw", &p("full.txt"), &["--full-names"]);

        let svg = std::fs::read_to_string(p("names.svg")).unwrap();
        let titles = svg_titles(&svg);
        for (short, _) in FRAMES {
            let label = format!("{short} (libnames.so)");
            assert!(
                titles.iter().any(|t| t.starts_with(&label)),
                "{}: no SVG frame {label:?} in {titles:#?}",
                fx.label
            );
        }
        assert!(
            !titles.iter().any(|t| t.contains("std::allocator")),
            "{}: a signature in the SVG: {titles:#?}",
            fx.label
        );

        let raw = std::fs::read_to_string(p("names.txt")).unwrap();
        let stack = raw
            .lines()
            .find(|l| l.contains("names_block"))
            .unwrap_or_else(|| panic!("{}: no stack of the C++ thread:\n{raw}", fx.label));
        // Collapsed stacks are outermost first.
        let frames: Vec<String> = stack
            .rsplit_once(' ')
            .unwrap()
            .0
            .split(';')
            .rev()
            .map(|f| f.strip_suffix(" (libnames.so)").unwrap_or(f).to_string())
            .collect();
        let shown: Vec<&str> = FRAMES.iter().map(|f| f.0).collect();
        if let Err(e) = in_order(&frames, &shown) {
            panic!("{}: collapsed stacks: {e}", fx.label);
        }
        assert!(!raw.contains("std::allocator"), "{}: {raw}", fx.label);
        let full = std::fs::read_to_string(p("full.txt")).unwrap();
        assert!(
            full.contains(FRAMES[0].1),
            "{}: --full-names: {full}",
            fx.label
        );

        // diff: the full names of one recording are read short, so the
        // two compare; with --full-names they stay as written.
        let table = |extra: &[&str]| {
            let svg = p("diff.svg");
            let mut args: Vec<String> = vec![
                "diff".into(),
                p("names.txt").to_str().unwrap().to_string(),
                p("full.txt").to_str().unwrap().to_string(),
                "-o".into(),
                svg.to_str().unwrap().to_string(),
                "--top".into(),
                "100".into(),
            ];
            args.extend(extra.iter().map(|s| s.to_string()));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = pyinspect(&args);
            out.assert_success();
            (out.stdout, std::fs::read_to_string(svg).unwrap())
        };
        // The frames' shares are the same in both: they show in the
        // differential flame graph, not in the table of changes.
        let (text, svg) = table(&[]);
        let titles = svg_titles(&svg);
        for (short, _) in FRAMES {
            let label = format!("{short} (libnames.so)");
            assert!(
                titles.iter().any(|t| t.starts_with(&label)),
                "{}: no diff SVG frame {label:?} in {titles:#?}",
                fx.label
            );
        }
        assert!(
            !text.contains("std::allocator")
                && !titles.iter().any(|t| t.contains("std::allocator")),
            "{}: a signature in the diff:\n{text}\n{titles:#?}",
            fx.label
        );
        let (_, svg) = table(&["--full-names"]);
        assert!(
            svg_titles(&svg).iter().any(|t| t.starts_with(FRAMES[0].1)),
            "{}: diff --full-names lost the signatures",
            fx.label
        );
    });
}

/// The PyTorch venv (torch's CPU wheel, with pyenv's 3.12), installed by CI.
const TORCH_PYTHON: &str = "/opt/pyinspect-torch/venv/bin/python";

/// Whether a native name is short: no argument list (the parentheses of
/// `(anonymous namespace)`, `{lambda#1}` and `operator()` aside) and no
/// spelled-out template arguments.
fn is_short(name: &str) -> bool {
    let rest = name
        .replace("(anonymous namespace)", "")
        .replace("operator()", "");
    // A template argument may hold a cast (`RowwiseMomentsImpl<float,
    // (long)4>`): only parentheses outside `<…>` are a parameter list.
    let mut depth = 0usize;
    let outside: String = rest
        .chars()
        .filter(|&c| {
            match c {
                '<' => depth += 1,
                '>' => depth = depth.saturating_sub(1),
                _ => return depth == 0,
            }
            false
        })
        .collect();
    !outside.contains('(') && !rest.contains("const&") && name.len() < 200
}

/// The check itself: a cast in a template argument is not a parameter list.
#[test]
fn short_names_may_hold_casts_in_template_arguments() {
    assert!(is_short(
        "at::native::AVX2::RowwiseMomentsImpl<float, (long)4>"
    ));
    assert!(is_short("(anonymous namespace)::f<int>::operator()"));
    assert!(!is_short("at::native::f(at::Tensor const&)"));
    assert!(!is_short("g<int>(long)"));
}

/// The issue's workload: libtorch's frames in the text dump, the SVG's
/// labels and collapsed stacks are short, JSON's signatures whole.
#[test]
fn pytorch_frames_are_named_short() {
    let interp = common::find_interpreter("pyenv's 3.12", |i| {
        i.version == (3, 12) && i.label.starts_with("pyenv ")
    });
    let torch = Interpreter {
        label: format!("{} (PyTorch venv)", interp.label),
        python: TORCH_PYTHON.into(),
        ..interp.clone()
    };
    assert!(
        torch.python.exists(),
        "{TORCH_PYTHON} is missing: the PyTorch venv is installed by CI"
    );
    let fx = Fixture::spawn_with_timeout(
        &torch,
        "native/torch_names.py",
        &[],
        std::time::Duration::from_secs(180),
    );
    let pid = fx.pid.to_string();
    let in_torch = |m: &str| m.starts_with("libtorch") || m.starts_with("libc10");
    // The model thread is always in a forward pass, which runs in C++ from
    // the encoder layer's own kernel down; a few tries for a stack that
    // reaches it.
    let want = "at::native::transformer_encoder_layer_forward";
    let mut seen = None;
    for _ in 0..20 {
        let out = pyinspect(&["dump", "--native", "--json", "--pid", &pid]);
        out.assert_success();
        let doc = out.json_lines().remove(0);
        let model = doc["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "model")
            .expect("the model thread")
            .clone();
        let frames: Vec<Value> = model["frames"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| in_torch(f["module"].as_str().unwrap_or("")))
            .cloned()
            .collect();
        for f in &frames {
            let n = f["function"].as_str().unwrap();
            assert!(is_short(n), "not short: {n:?}");
        }
        if let Some(f) = frames.iter().find(|f| f["function"] == want) {
            let sig = f["signature"].as_str().unwrap();
            assert!(
                sig.starts_with(&format!("{want}(at::Tensor const&, long, long,")),
                "{sig}"
            );
            // The dispatcher's wrappers of the kernels: hundreds or
            // thousands of characters whole (as long as the kernel's own
            // signature, twice: `mm`'s is about 440), the short name
            // without its template arguments.
            let wrappers: Vec<&Value> = frames
                .iter()
                .filter(|f| f["function"] == "c10::impl::wrap_kernel_functor_unboxed_<…>::call")
                .collect();
            assert!(!wrappers.is_empty(), "{frames:#?}");
            assert!(
                wrappers.iter().all(|w| {
                    let s = w["signature"].as_str().unwrap();
                    s.starts_with("c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<c10::CompileTimeFunctionPointer<")
                        && s.contains(">::call(c10::OperatorKernel*, c10::DispatchKeySet")
                        && s.len() > 300
                }),
                "{wrappers:#?}"
            );
            seen = Some(frames.len());
            break;
        }
    }
    assert!(seen.is_some(), "{}: no dump reached {want}", fx.label);

    let out = pyinspect(&["dump", "--native", "--pid", &pid]);
    out.assert_success();
    let frame_lines = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("    ") && l.contains(" (libtorch"));
    for l in frame_lines {
        let name = l.trim().rsplit_once(" (").unwrap().0;
        assert!(is_short(name), "text: not short: {l:?}");
    }

    let dir = tempfile::tempdir().unwrap();
    let svg_path = dir.path().join("torch.svg");
    let raw_path = dir.path().join("torch.txt");
    record(&pid, "flamegraph", &svg_path, &[]);
    record(&pid, "raw", &raw_path, &[]);
    let titles = svg_titles(&std::fs::read_to_string(&svg_path).unwrap());
    let torch_titles: Vec<&String> = titles.iter().filter(|t| t.contains("(libtorch")).collect();
    assert!(
        torch_titles
            .iter()
            .any(|t| t.starts_with(&format!("{want} (libtorch_cpu.so)"))),
        "{torch_titles:#?}"
    );
    for t in &torch_titles {
        let name = t.split(" (libtorch").next().unwrap();
        assert!(is_short(name), "SVG: not short: {t:?}");
    }
    let raw = std::fs::read_to_string(&raw_path).unwrap();
    assert!(raw.contains(want), "{raw}");
    for stack in raw.lines() {
        let stack = stack.rsplit_once(' ').unwrap().0;
        for f in stack.split(';').filter(|f| f.contains("(libtorch")) {
            let name = f.split(" (libtorch").next().unwrap();
            assert!(is_short(name), "collapsed: not short: {f:?}");
        }
    }
}
