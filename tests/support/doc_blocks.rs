//! Reading the shell blocks of the docs: fenced blocks, the commands in them (a logical line,
//! `\` continuations joined, a `for … done` loop kept whole), and the output a command's
//! comments say it prints.
//!
//! The conventions the docs follow (docs/contributing.md):
//! - a block a user runs is fenced as ```` ```sh ````; diagrams and sample output are
//!   ```` ```text ```` (a `text` block whose lines look like commands is an error);
//! - `cmd   # → TEXT` says the command's output (stdout and stderr) has a line containing
//!   TEXT; comment lines `#   TEXT` (three spaces) right below a command continue that
//!   text (the docs wrap a long line); `…` in TEXT stands for anything within the line.

/// A fenced block of a markdown file.
#[derive(Debug, Clone)]
pub struct Block {
    /// 1-based line of the block's first body line.
    pub line: usize,
    /// The info string (`sh`, `text`, `` for a bare fence).
    pub lang: String,
    /// The body, with the fence's indentation removed.
    pub body: Vec<String>,
}

/// Every fenced block of `text`.
pub fn blocks(text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        let indent = l.len() - l.trim_start().len();
        if let Some(info) = l.trim_start().strip_prefix("```") {
            let lang = info.trim().to_string();
            let mut body = Vec::new();
            let mut j = i + 1;
            while j < lines.len() && !lines[j].trim_start().starts_with("```") {
                let b = lines[j];
                let cut = b.len() - b.trim_start().len();
                body.push(b[cut.min(indent)..].to_string());
                j += 1;
            }
            out.push(Block { line: i + 2, lang, body });
            i = j + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// Whether a fence's info string is a shell's.
pub fn is_shell(lang: &str) -> bool {
    matches!(lang, "sh" | "bash" | "shell" | "console")
}

/// One command of a shell block.
#[derive(Debug, Clone, PartialEq)]
pub struct DocCommand {
    /// 1-based line in the markdown file.
    pub line: usize,
    /// The command as written (continuation lines joined with their newlines; a loop whole),
    /// comments removed.
    pub text: String,
    /// Text the output must contain, one entry per `# →` / `#   …` comment.
    pub expect: Vec<String>,
}

impl DocCommand {
    /// The command on one line, whitespace runs made one space (what the table matches).
    pub fn flat(&self) -> String {
        self.text.replace("\\\n", " ").split_whitespace().collect::<Vec<_>>().join(" ")
    }
}

/// `line` without its comment: a `#` at the start or after whitespace, outside quotes.
pub fn strip_comment(line: &str) -> (&str, Option<&str>) {
    let (mut single, mut double) = (false, false);
    let mut prev_space = true;
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev_space => return (line[..i].trim_end(), Some(&line[i + 1..])),
            _ => {}
        }
        prev_space = c.is_whitespace();
    }
    (line.trim_end(), None)
}

/// How many loops/conditionals a line opens minus how many it closes.
fn depth_change(code: &str) -> i32 {
    let mut d = 0;
    for word in code.split(|c: char| c.is_whitespace() || c == ';' || c == '&') {
        match word {
            "for" | "while" | "until" | "if" | "case" => d += 1,
            "done" | "fi" | "esac" => d -= 1,
            _ => {}
        }
    }
    d
}

/// The commands of a shell block, in order. `first_line` is the block's first body line.
pub fn commands(body: &[String], first_line: usize) -> Vec<DocCommand> {
    let mut out: Vec<DocCommand> = Vec::new();
    let mut cur: Option<(DocCommand, i32, bool)> = None; // (command, depth, continued)
    let mut expect_open = false;
    for (k, raw) in body.iter().enumerate() {
        let (code, comment) = strip_comment(raw);
        let line = first_line + k;
        if code.trim().is_empty() {
            if let Some(c) = comment {
                // `#   TEXT` continues the expected output of the command above it.
                if expect_open && c.starts_with("   ") {
                    if let Some(last) = out.last_mut() {
                        let t = c.trim();
                        match last.expect.last_mut() {
                            Some(e) if !e.is_empty() => {
                                e.push(' ');
                                e.push_str(t);
                            }
                            _ => last.expect.push(t.to_string()),
                        }
                    }
                    continue;
                }
            }
            expect_open = false;
            continue;
        }
        let arrow = comment.and_then(|c| c.trim_start().strip_prefix('→')).map(|t| t.trim().to_string());
        let continued = code.ends_with('\\');
        match cur.take() {
            Some((mut c, depth, was_continued)) if depth > 0 || was_continued => {
                c.text.push('\n');
                c.text.push_str(code);
                c.expect.extend(arrow);
                let depth = depth + depth_change(code);
                cur = Some((c, depth, continued));
            }
            prev => {
                if let Some((c, _, _)) = prev {
                    out.push(c);
                }
                let c = DocCommand { line, text: code.to_string(), expect: arrow.into_iter().collect() };
                cur = Some((c, depth_change(code), continued));
            }
        }
        if let Some((c, depth, cont)) = cur.take() {
            if depth <= 0 && !cont {
                out.push(c);
                expect_open = true;
            } else {
                cur = Some((c, depth, cont));
            }
        }
    }
    if let Some((c, _, _)) = cur {
        out.push(c);
    }
    // An expectation started by a bare `#   TEXT` line with nothing before it is still one.
    for c in &mut out {
        c.expect.retain(|e| !e.is_empty());
    }
    out
}

/// Program names and prefixes whose presence as a line's first word makes a `text` block a
/// block of commands.
const COMMAND_WORDS: &[&str] = &[
    "cargo",
    "neuron-vfio",
    "neuron-vfio-bench",
    "neuron-ls",
    "neuron-top",
    "neuron-monitor",
    "nccom-test",
    "neuron-vfio-k8s-device-plugin",
    "export",
    "sudo",
    "mpirun",
    "torchrun",
    "srun",
    "python3",
    "pip",
    "cc",
    "crun",
    "ip",
    "for",
];

/// Whether a non-shell block reads like commands a user runs (then it must be fenced `sh`):
/// a line that starts (unindented) with a program the docs run, a repository script or an
/// environment assignment.
pub fn looks_like_commands(body: &[String]) -> Option<String> {
    for l in body.iter().filter(|l| !l.starts_with(char::is_whitespace)) {
        let (code, _) = strip_comment(l);
        let first = code.split_whitespace().next().unwrap_or("");
        let is_env = first.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty() && k.bytes().all(|b| b.is_ascii_uppercase() || b == b'_' || b.is_ascii_digit())
        });
        let word = if is_env { code.split_whitespace().nth(1).unwrap_or("") } else { first };
        if is_env
            || COMMAND_WORDS.contains(&word)
            || word.starts_with("scripts/")
            || word.starts_with("target/")
            || word.starts_with("./")
        {
            return Some(l.clone());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(str::to_string).collect()
    }

    #[test]
    fn commands_join_continuations_and_loops_and_read_expectations() {
        let body = lines(
            "a x   # first\nb \\\n  y   # → OUT 1\n#   wrapped\n#   more\n\nfor r in 0 1; do\n  c $r &\ndone\nwait\n# a note\n#   not output\n",
        );
        let c = commands(&body, 10);
        let got: Vec<(usize, &str, Vec<&str>)> =
            c.iter().map(|c| (c.line, c.text.as_str(), c.expect.iter().map(String::as_str).collect())).collect();
        assert_eq!(
            got,
            [
                (10, "a x", vec![]),
                (11, "b \\\n  y", vec!["OUT 1 wrapped more"]),
                (16, "for r in 0 1; do\n  c $r &\ndone", vec![]),
                (19, "wait", vec![]),
            ]
        );
        assert_eq!(c[1].flat(), "b y");
    }

    #[test]
    fn comments_inside_quotes_are_not_comments() {
        assert_eq!(strip_comment("echo 'a # b' # c"), ("echo 'a # b'", Some(" c")));
        assert_eq!(strip_comment("x a#b"), ("x a#b", None));
    }

    #[test]
    fn text_blocks_of_commands_are_found() {
        assert!(looks_like_commands(&lines("FOO=1 neuron-vfio ls")).is_some());
        assert!(looks_like_commands(&lines("scripts/x.sh --y")).is_some());
        assert!(looks_like_commands(&lines("  size(B)  count\nnccom-test: rank 2: failed")).is_none());
        assert!(looks_like_commands(&lines(" client ── broker")).is_none());
    }
}
