"""Hand-written next-edit cases: Rust (see scripts/build_curated_next_edit.py for the format)."""

TABLE_RS = '''use std::fmt::Write;

pub struct Row {
    pub name: String,
    pub hits: u64,
}

pub fn render_table(rows: &[Row]) -> String {
    let mut buf = String::new();
    buf.push_str("name       hits\\n");
    for row in rows {
        writeln!(buf, "{:<10} {:>5}", row.name, row.hits).unwrap();
    }
    buf
}

pub fn total_hits(rows: &[Row]) -> u64 {
    rows.iter().map(|r| r.hits).sum()
}
'''

PARSE_RS = '''#[derive(Debug, PartialEq)]
pub struct Entry {
    pub key: String,
    pub value: String,
}

pub fn parse_line(line: &str) -> Option<Entry> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (key, value) = line.split_once('=')?;
    Some(Entry {
        key: key.trim().to_string(),
        value: value.trim().to_string(),
    })
}

pub fn parse_all(text: &str) -> Vec<Entry> {
    text.lines().filter_map(parse_line).collect()
}
'''

STATS_RS = '''use std::collections::HashMap;

#[derive(Default)]
pub struct Stat {
    pub hits: u64,
    pub last_seen: u64,
}

pub struct Tracker {
    stats: HashMap<String, Stat>,
}

impl Tracker {
    pub fn record(&mut self, key: &str, now: u64) {
        if let Some(e) = self.stats.get_mut(key) {
            e.hits += 1;
            e.last_seen = now;
        } else {
            self.stats.insert(key.to_string(), Stat { hits: 1, last_seen: now });
        }
    }

    pub fn hits(&self, key: &str) -> u64 {
        self.stats.get(key).map_or(0, |s| s.hits)
    }
}
'''

RUN_RS = '''use std::io;
use std::process::{Command as Process, ExitStatus};

pub struct Command {
    pub name: String,
    pub args: Vec<String>,
}

pub fn run(cmd: &Command) -> io::Result<ExitStatus> {
    let mut child = Process::new(&cmd.name).args(&cmd.args).spawn()?;
    child.wait()
}

pub fn run_all(cmds: &[Command]) -> io::Result<()> {
    for cmd in cmds {
        let status = run(cmd)?;
        if !status.success() {
            return Err(io::Error::other(format!("{} failed", cmd.name)));
        }
    }
    Ok(())
}
'''

CONFIG_RS = '''use serde::Deserialize;
use std::{fs, path::Path};

#[derive(Debug, Deserialize)]
pub struct Config {
    pub name: String,
    pub workers: usize,
}

#[derive(Debug)]
pub enum LoadError {
    Io(std::io::Error),
    Toml(toml::de::Error),
}

pub fn load(path: &Path) -> Result<Config, LoadError> {
    let text = fs::read_to_string(path).map_err(LoadError::Io)?;
    let config: Config = toml::from_str(&text).map_err(LoadError::Toml)?;
    Ok(config)
}
'''

SHAPES_RS = '''use std::f64::consts::PI;

#[derive(Debug, Clone, Copy)]
pub enum Shape {
    Circle { radius: f64 },
    Rect { width: f64, height: f64 },
}

impl Shape {
    pub fn circle(radius: f64) -> Self {
        Shape::Circle { radius }
    }

    pub fn square(side: f64) -> Self {
        Shape::Rect { width: side, height: side }
    }

    pub fn rect(width: f64, height: f64) -> Self {
        Shape::Rect { width, height }
    }

    pub fn is_round(&self) -> bool {
        matches!(self, Shape::Circle { .. })
    }
}

/// Shapes are compared by area; see `area` below.
pub fn larger<'a>(a: &'a Shape, b: &'a Shape) -> &'a Shape {
    if area(a) >= area(b) { a } else { b }
}

pub fn total_area(shapes: &[Shape]) -> f64 {
    shapes.iter().map(area).sum()
}

pub fn area(shape: &Shape) -> f64 {
    match shape {
        Shape::Circle { radius } => PI * radius * radius,
        Shape::Rect { width, height } => width * height,
    }
}
'''

POOL_RS = '''use std::time::Duration;

#[derive(Debug, Clone)]
pub struct PoolConfig {
    pub max_conns: usize,
    pub idle_timeout_secs: u64,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            max_conns: 10,
            idle_timeout_secs: 300,
        }
    }
}

impl PoolConfig {
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.idle_timeout_secs)
    }
}
'''

MAIN_RS = '''mod pool;

use pool::PoolConfig;

fn main() {
    let workers = std::thread::available_parallelism().map_or(4, |n| n.get());
    let config = PoolConfig {
        max_conns: workers * 4,
        idle_timeout_secs: 60,
    };
    log_start(workers);
    println!("pool: {:?}", config);
}

fn log_start(workers: usize) {
    let version = env!("CARGO_PKG_VERSION");
    eprintln!("starting v{version} with {workers} workers");
}
'''

QUEUE_RS = '''pub struct Queue<T> {
    name: String,
    items: Vec<T>,
}

impl<T> Queue<T> {
    pub fn new(name: String) -> Self {
        Self {
            name,
            items: Vec::new(),
        }
    }

    pub fn push(&mut self, item: T) {
        self.items.push(item);
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}
'''

DB_RS = '''use std::env;

pub struct DbConfig {
    pub host: String,
    pub port: String,
    pub user: String,
    pub password: String,
}

pub fn from_env() -> Result<DbConfig, env::VarError> {
    let host = env::var("DB_HOST").unwrap();
    let port = env::var("DB_PORT").unwrap();
    let user = env::var("DB_USER").unwrap();
    let password = env::var("DB_PASSWORD").unwrap();
    Ok(DbConfig { host, port, user, password })
}
'''

ERROR_RS = '''use std::fmt;
use std::io;
use std::num::ParseIntError;

#[derive(Debug)]
pub enum AppError {
    Io(io::Error),
    Parse(ParseIntError),
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppError::Io(e) => write!(f, "i/o error: {e}"),
            AppError::Parse(e) => write!(f, "bad number: {e}"),
        }
    }
}

impl From<io::Error> for AppError {
    fn from(e: io::Error) -> Self {
        AppError::Io(e)
    }
}
'''

RING_RS = '''/// A fixed-size ring bufer that overwrites its oldest element.
pub struct Ring<T> {
    buf: Vec<Option<T>>,
    head: usize,
}

impl<T> Ring<T> {
    pub fn with_capacity(n: usize) -> Self {
        Self { buf: (0..n).map(|_| None).collect(), head: 0 }
    }

    pub fn push(&mut self, item: T) {
        let n = self.buf.len();
        self.buf[self.head] = Some(item);
        self.head = (self.head + 1) % n;
    }
}
'''

WORDS_RS = '''pub fn word_count(text: &str) -> usize {
    let mut count = 0;
    for word in text.split_whitespace() {
        if word.chars().any(char::is_alphanumeric) {
            count += 1;
        }
    }
    count
}

pub fn line_count(text: &str) -> usize {
    let mut count = 0;
    for line in text.lines() {
        if !line.trim().is_empty() {
            count += 1;
        }
    }
    count
}
'''

SLUG_RS = '''pub fn slug(title: &str) -> String {
    let mut out = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowercases() {
        assert_eq!(slug("Hello World"), "hello-world");
    }
}
'''

CASES = [
    {
        "id": "rs-below-rename-buf",
        "category": "next-edit/below",
        "language": "rust",
        "files_before": {"src/table.rs": TABLE_RS},
        "steps": [{"path": "src/table.rs", "old": "    let mut buf = String::new();", "new": "    let mut out = String::new();"}],
        "cursor": {"path": "src/table.rs", "after": "    let mut out"},
        "expected": [
            {"path": "src/table.rs", "old": '    buf.push_str("name', "new": '    out.push_str("name'},
            {"path": "src/table.rs", "old": "writeln!(buf,", "new": "writeln!(out,"},
            {"path": "src/table.rs", "old": "    buf\n}", "new": "    out\n}"},
        ],
        "note": "buf renamed to out; its remaining uses (push_str, writeln!, the tail expression) are all in the "
                "region",
    },
    {
        "id": "rs-below-rename-param",
        "category": "next-edit/below",
        "language": "rust",
        "files_before": {"src/parse.rs": PARSE_RS},
        "steps": [{"path": "src/parse.rs", "old": "pub fn parse_line(line: &str)", "new": "pub fn parse_line(input: &str)"}],
        "cursor": {"path": "src/parse.rs", "after": "parse_line(input"},
        "expected": {"path": "src/parse.rs", "old": "    let line = line.trim();", "new": "    let line = input.trim();"},
        "note": "the parameter renamed to input; its only use is the shadowing let on the next line, whose own "
                "name line stays (the later uses read the shadow)",
    },
    {
        "id": "rs-below-rename-binding",
        "category": "next-edit/below",
        "language": "rust",
        "files_before": {"src/stats.rs": STATS_RS},
        "steps": [{"path": "src/stats.rs", "old": "if let Some(e) = self.stats.get_mut(key)",
                   "new": "if let Some(stat) = self.stats.get_mut(key)"}],
        "cursor": {"path": "src/stats.rs", "after": "if let Some(stat"},
        "expected": [
            {"path": "src/stats.rs", "old": "            e.hits += 1;", "new": "            stat.hits += 1;"},
            {"path": "src/stats.rs", "old": "            e.last_seen = now;",
             "new": "            stat.last_seen = now;"},
        ],
        "note": "the if-let binding renamed e -> stat; its two uses (hits, last_seen) are the next lines",
    },
    {
        "id": "rs-above-param-verbose",
        "category": "next-edit/above",
        "language": "rust",
        "files_before": {"src/run.rs": RUN_RS},
        "steps": [{"path": "src/run.rs", "old": "    let mut child = Process::new",
                   "new": "    if verbose {\n        eprintln!(\"running {} {:?}\", cmd.name, cmd.args);\n    }\n"
                          "    let mut child = Process::new"}],
        "cursor": {"path": "src/run.rs", "after": "cmd.name, cmd.args);\n    }"},
        "expected": [
            {"path": "src/run.rs", "old": "pub fn run(cmd: &Command) -> io::Result<ExitStatus> {",
             "new": "pub fn run(cmd: &Command, verbose: bool) -> io::Result<ExitStatus> {"},
            {"path": "src/run.rs", "old": "pub fn run_all(cmds: &[Command]) -> io::Result<()> {",
             "new": "pub fn run_all(cmds: &[Command], verbose: bool) -> io::Result<()> {"},
            {"path": "src/run.rs", "old": "run(cmd)?", "new": "run(cmd, verbose)?"},
        ],
        "note": "run's body now reads verbose; the signature three lines above must take it, and its one call "
                "site, in run_all within the region, must pass it: run_all takes verbose too and passes it on",
    },
    {
        "id": "rs-above-rename-at-use",
        "category": "next-edit/above",
        "language": "rust",
        "files_before": {"src/config.rs": CONFIG_RS},
        "steps": [{"path": "src/config.rs", "old": "    Ok(config)\n", "new": "    Ok(settings)\n"}],
        "cursor": {"path": "src/config.rs", "after": "    Ok(settings"},
        "expected": {"path": "src/config.rs", "old": "    let config: Config = toml::from_str",
                     "new": "    let settings: Config = toml::from_str"},
        "note": "renamed at its use in the tail expression; the let on the line above still says config",
    },
    {
        "id": "rs-jump-variant-match-arm",
        "category": "next-edit/jump",
        "language": "rust",
        "files_before": {"src/shapes.rs": SHAPES_RS},
        "steps": [{"path": "src/shapes.rs", "old": "    Rect { width: f64, height: f64 },\n",
                   "new": "    Rect { width: f64, height: f64 },\n    Triangle { base: f64, height: f64 },\n"}],
        "cursor": {"path": "src/shapes.rs", "after": "    Triangle { base: f64, height: f64 },"},
        "expected": {"path": "src/shapes.rs", "old": "        Shape::Rect { width, height } => width * height,\n",
                     "new": "        Shape::Rect { width, height } => width * height,\n"
                            "        Shape::Triangle { base, height } => 0.5 * base * height,\n"},
        "note": "a new enum variant makes area()'s match, about 30 lines below, non-exhaustive (the other "
                "methods use matches! or no match); the arm is the triangle area",
    },
    {
        "id": "rs-jump-field-rename-other-file",
        "category": "next-edit/jump",
        "language": "rust",
        "files_before": {"src/pool.rs": POOL_RS, "src/main.rs": MAIN_RS},
        "steps": [
            {"path": "src/pool.rs", "old": "    pub max_conns: usize,", "new": "    pub max_connections: usize,"},
            {"path": "src/pool.rs", "old": "            max_conns: 10,", "new": "            max_connections: 10,"},
        ],
        "cursor": {"path": "src/pool.rs", "after": "            max_connections"},
        "expected": {"path": "src/main.rs", "old": "        max_conns: workers * 4,", "new": "        max_connections: workers * 4,"},
        "note": "the field renamed in pool.rs (declaration and Default); main.rs builds a PoolConfig with the "
                "old name",
    },
    {
        "id": "rs-complete-new-field-init",
        "category": "next-edit/complete",
        "language": "rust",
        "files_before": {"src/queue.rs": QUEUE_RS},
        "steps": [
            {"path": "src/queue.rs", "old": "    items: Vec<T>,\n}", "new": "    items: Vec<T>,\n    capacity: usize,\n}"},
            {"path": "src/queue.rs", "old": "pub fn new(name: String) -> Self {", "new": "pub fn new(name: String, capacity: usize) -> Self {"},
        ],
        "cursor": {"path": "src/queue.rs", "after": "capacity: usize)"},
        "expected": {"path": "src/queue.rs", "old": "            items: Vec::new(),\n",
                     "new": "            items: Vec::new(),\n            capacity,\n"},
        "note": "a field and the constructor parameter for it; the struct expression in new() is missing it "
                "(shorthand, like name)",
    },
    {
        "id": "rs-complete-question-mark-pattern",
        "category": "next-edit/complete",
        "language": "rust",
        "files_before": {"src/db.rs": DB_RS},
        "steps": [
            {"path": "src/db.rs", "old": 'env::var("DB_HOST").unwrap();', "new": 'env::var("DB_HOST")?;'},
            {"path": "src/db.rs", "old": 'env::var("DB_PORT").unwrap();', "new": 'env::var("DB_PORT")?;'},
        ],
        "expected": [
            {"path": "src/db.rs", "old": 'env::var("DB_USER").unwrap();', "new": 'env::var("DB_USER")?;'},
            {"path": "src/db.rs", "old": 'env::var("DB_PASSWORD").unwrap();',
             "new": 'env::var("DB_PASSWORD")?;'},
        ],
        "note": "two of four unwraps turned into ? (the function returns Result<_, VarError>); DB_USER and "
                "DB_PASSWORD are the next lines",
    },
    {
        "id": "rs-complete-pasted-from-impl",
        "category": "next-edit/complete",
        "language": "rust",
        "files_before": {"src/error.rs": ERROR_RS},
        "steps": [
            {"path": "src/error.rs", "old": "        AppError::Io(e)\n    }\n}\n",
             "new": "        AppError::Io(e)\n    }\n}\n\nimpl From<io::Error> for AppError {\n"
                    "    fn from(e: io::Error) -> Self {\n        AppError::Io(e)\n    }\n}\n"},
            {"path": "src/error.rs", "old": "impl From<io::Error> for AppError {", "new": "impl From<ParseIntError> for AppError {",
             "occurrence": 2},
        ],
        "cursor": {"path": "src/error.rs", "after": "impl From<ParseIntError"},
        "expected": [
            {"path": "src/error.rs", "old": "    fn from(e: io::Error) -> Self {",
             "new": "    fn from(e: ParseIntError) -> Self {", "occurrence": 2},
            {"path": "src/error.rs", "old": "        AppError::Io(e)\n",
             "new": "        AppError::Parse(e)\n", "occurrence": 2},
        ],
        "note": "the From<io::Error> impl pasted and its trait changed to From<ParseIntError>; its body still "
                "takes an io::Error and builds the Io variant: the parameter type and the Parse variant, the next "
                "two lines",
    },
    {
        "id": "rs-noise-doc-typo",
        "category": "no-edit/noise",
        "language": "rust",
        "files_before": {"src/ring.rs": RING_RS},
        "steps": [{"path": "src/ring.rs", "old": "ring bufer that", "new": "ring buffer that"}],
        "expected": None,
        "note": "a typo fixed in a doc comment (the field buf is not the misspelt word)",
    },
    {
        "id": "rs-noise-rename-other-fn",
        "category": "no-edit/noise",
        "language": "rust",
        "files_before": {"src/words.rs": WORDS_RS},
        "steps": [
            {"path": "src/words.rs", "old": "    let mut count = 0;\n    for word", "new": "    let mut words = 0;\n    for word"},
            {"path": "src/words.rs", "old": "            count += 1;", "new": "            words += 1;", "occurrence": 1},
            {"path": "src/words.rs", "old": "    count\n}\n\npub fn line_count", "new": "    words\n}\n\npub fn line_count"},
        ],
        "cursor": {"path": "src/words.rs", "after": "    words\n}"},
        "expected": None,
        "note": "word_count's count renamed to words at all three uses; line_count's own count stays",
    },
    {
        "id": "rs-noise-new-test",
        "category": "no-edit/noise",
        "language": "rust",
        "files_before": {"src/slug.rs": SLUG_RS},
        "steps": [{"path": "src/slug.rs", "old": '"hello-world");\n    }\n',
                   "new": '"hello-world");\n    }\n\n    #[test]\n    fn collapses_separators() {\n'
                          '        assert_eq!(slug("a  --  b"), "a-b");\n    }\n'}],
        "cursor": {"path": "src/slug.rs", "after": '"a-b");\n    }'},
        "expected": None,
        "note": "a new unit test added, complete; nothing else changes",
    },
]
