//! The interactive shell: multi-line statements ended by `;`, history saved as
//! it goes, tab completion ([`super::complete`]), Ctrl-C to cancel a running
//! statement ([`Interrupt`]), a progress line for statements that run longer
//! than 2 s, and dot commands (see [`HELP`]).
//!
//! The table format is bounded as DuckDB's shell bounds it: at most 40 rows are
//! shown (the first 20 and the last 20 around a `…` row), with a footer
//! `N rows (40 shown)`; `.maxrows` changes the bound. CSV and JSON keep every row.
use super::complete::{Helper, Names, State};
use super::output::{error_line, is_interrupted, report_error, run_statement, scan, split_statements, stdout_closed, Display, Format, Interrupted, Stdout};
use crate::guard::catch;
use crate::{GpuMode, Ridgeline};
use datafusion::error::{DataFusionError, Result};
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The dot commands (`.help`).
pub const HELP: &str = ".tables             list tables
.schema [NAME]      a table's columns (every table's without NAME)
.format table|csv|json   result format (.mode is the same)
.maxrows N          rows the table format shows at most (0: all; default 40)
.timer on|off       print each statement's time
.progress on|off|SECONDS  a progress line for statements running longer (default 2 s)
.gpu [off|auto|on]  where operators run
.explain SQL        physical plan, GPU nodes marked
.read FILE          run the SQL and dot commands in FILE
.output [FILE]      send results to FILE (without FILE: back to the terminal)
.once FILE          send the next result to FILE
.help               this text
.quit               leave (also .exit, \\q, exit, quit, Ctrl-D)
Statements end with ';'. Ctrl-C cancels the running statement (or the one being typed);
Tab completes key words, tables, columns and functions.";

/// Rows the table format shows by default.
pub const DEFAULT_MAX_ROWS: usize = 40;

/// How deeply `.read` files may read others.
const MAX_READ_DEPTH: usize = 8;

fn io(e: std::io::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

fn plan_err(m: impl Into<String>) -> DataFusionError {
    DataFusionError::Plan(m.into())
}

/// Cancels the statement a [`Shell`] is running (what Ctrl-C does): the
/// statement's future is dropped, which stops its DataFusion tasks, and it
/// ends with the error `interrupted`. An interrupt while nothing runs is
/// forgotten at the next input line. Cloning shares the handle.
#[derive(Clone, Default)]
pub struct Interrupt(Arc<InterruptInner>);

#[derive(Default)]
struct InterruptInner {
    count: AtomicU64,
    notify: tokio::sync::Notify,
}

impl Interrupt {
    /// Interrupts the running statement (and the rest of its input line or `.read` file).
    pub fn interrupt(&self) {
        self.0.count.fetch_add(1, Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }

    fn count(&self) -> u64 {
        self.0.count.load(Ordering::SeqCst)
    }

    /// Resolves once there has been an interrupt after `count` was read.
    async fn after(&self, count: u64) {
        loop {
            let wait = self.0.notify.notified();
            tokio::pin!(wait);
            wait.as_mut().enable();
            if self.count() != count {
                return;
            }
            wait.await;
        }
    }
}

fn interrupted() -> DataFusionError {
    DataFusionError::External(Box::new(Interrupted))
}

/// The progress line of a long statement: a spinner with the time taken on
/// standard error (drawn only on a terminal), from `after` until the statement
/// ends or starts printing its result.
struct Progress {
    done: Arc<AtomicBool>,
    bar: Arc<Mutex<Option<indicatif::ProgressBar>>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    fn start(after: Option<Duration>) -> Progress {
        let done = Arc::new(AtomicBool::new(false));
        let bar: Arc<Mutex<Option<indicatif::ProgressBar>>> = Arc::default();
        let task = after.map(|after| {
            let (done, bar) = (done.clone(), bar.clone());
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                let Ok(mut slot) = bar.lock() else { return };
                if done.load(Ordering::SeqCst) {
                    return;
                }
                let style = indicatif::ProgressStyle::with_template("{spinner} running for {elapsed} (Ctrl-C cancels)")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner());
                let pb = indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr()).with_style(style);
                pb.enable_steady_tick(Duration::from_millis(120));
                *slot = Some(pb);
            })
        });
        Progress { done, bar, task }
    }

    fn stop(&self) {
        if self.done.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(t) = &self.task {
            t.abort();
        }
        if let Ok(mut slot) = self.bar.lock() {
            if let Some(pb) = slot.take() {
                pb.finish_and_clear();
            }
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A writer that ends the progress line before the first output.
struct Watched<'a> {
    out: &'a mut dyn Write,
    progress: &'a Progress,
}

impl Write for Watched<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.progress.stop();
        self.out.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.progress.stop();
        self.out.write_all(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Where results go after `.output FILE` or `.once FILE`.
struct Redirect {
    file: std::io::BufWriter<std::fs::File>,
    /// `.once`: only the next command's.
    once: bool,
}

/// Shell state.
pub struct Shell {
    rl: Ridgeline,
    timer: bool,
    display: Display,
    /// SQL read but not yet ended by `;`.
    pending: String,
    /// Input lines taken so far, and the line where `pending` began.
    lines: usize,
    pending_from: usize,
    /// Error positions count lines from the start of the input (a script), not
    /// from the statement's start (the interactive shell).
    script_positions: bool,
    redirect: Option<Redirect>,
    interrupt: Interrupt,
    /// The interrupt count when the current input line began.
    scope: u64,
    progress_after: Option<Duration>,
    /// `.read` files being read.
    depth: usize,
    /// The completion names (shared with the line editor's helper).
    completion: Arc<Mutex<State>>,
}

impl Shell {
    /// A shell over an engine.
    pub fn new(rl: Ridgeline) -> Self {
        Shell {
            rl,
            timer: false,
            display: Display { format: Format::Table, max_rows: Some(DEFAULT_MAX_ROWS) },
            pending: String::new(),
            lines: 0,
            pending_from: 0,
            script_positions: false,
            redirect: None,
            interrupt: Interrupt::default(),
            scope: 0,
            progress_after: Some(Duration::from_secs(2)),
            depth: 0,
            completion: Arc::default(),
        }
    }

    /// A shell that reads a script: error positions count from the script's start.
    pub fn for_script(rl: Ridgeline) -> Self {
        let mut s = Shell::new(rl);
        s.script_positions = true;
        s
    }

    /// The handle that cancels the running statement (Ctrl-C).
    pub fn interrupter(&self) -> Interrupt {
        self.interrupt.clone()
    }

    /// After how long a running statement shows a progress line (`None`: never).
    pub fn set_progress_after(&mut self, after: Option<Duration>) {
        self.progress_after = after;
    }

    /// How results print now.
    pub fn display(&self) -> Display {
        self.display
    }

    /// Takes a fresh snapshot of the catalog's names for completion.
    pub async fn refresh_names(&mut self) {
        let names = Names::of(&self.rl).await;
        if let Ok(mut s) = self.completion.lock() {
            s.names = names;
        }
    }

    /// Completions of the word before `pos` in `line` (the statement's earlier
    /// lines being those pending): where the word starts and the candidates.
    pub fn complete(&self, line: &str, pos: usize) -> (usize, Vec<String>) {
        match self.completion.lock() {
            Ok(s) => s.names.complete(&self.pending, line, pos),
            Err(_) => (pos, vec![]),
        }
    }

    fn sync_pending(&self) {
        if let Ok(mut s) = self.completion.lock() {
            s.pending.clone_from(&self.pending);
        }
    }

    /// Handles a dot command (`results` takes what it prints); returns false on `.quit`.
    pub async fn dot(&mut self, line: &str, results: &mut dyn Write) -> Result<bool> {
        let mut parts = line.split_whitespace();
        let cmd = parts.next().unwrap_or("");
        let arg = parts.collect::<Vec<_>>().join(" ");
        let w = |out: &mut dyn Write, s: &str| writeln!(out, "{s}").map_err(io);
        let bool_arg = |cmd: &str, arg: &str| match arg.to_ascii_lowercase().as_str() {
            "on" | "true" | "1" => Ok(true),
            "off" | "false" | "0" => Ok(false),
            _ => Err(plan_err(format!("{cmd} expects on or off, not '{arg}'"))),
        };
        match cmd {
            ".quit" | ".exit" | ".q" => return Ok(false),
            ".help" => w(results, HELP)?,
            ".tables" => {
                let sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name";
                run_statement(&self.rl, sql, Display::all(self.display.format), false, results).await?
            }
            ".schema" => {
                let names: Vec<String> = if arg.is_empty() {
                    Names::of(&self.rl).await.tables.into_iter().map(|(t, _)| t).collect()
                } else {
                    vec![arg.clone()]
                };
                for name in &names {
                    let df = self.rl.session().table(name.as_str()).await?;
                    if arg.is_empty() {
                        w(results, &format!("{name}:"))?;
                    }
                    for f in df.schema().fields() {
                        let pad = if arg.is_empty() { "  " } else { "" };
                        w(results, &format!("{pad}{} {}{}", f.name(), f.data_type(), if f.is_nullable() { "" } else { " NOT NULL" }))?;
                    }
                }
            }
            ".timer" => self.timer = bool_arg(".timer", &arg)?,
            ".progress" => {
                self.progress_after = match arg.to_ascii_lowercase().as_str() {
                    "on" => Some(Duration::from_secs(2)),
                    "off" => None,
                    s => match s.parse::<f64>() {
                        Ok(v) if v.is_finite() && (0.0..=1e6).contains(&v) => Some(Duration::from_secs_f64(v)),
                        _ => return Err(plan_err(format!(".progress expects on, off or a number of seconds, not '{arg}'"))),
                    },
                }
            }
            ".gpu" => {
                if arg.is_empty() {
                    w(results, &format!("gpu mode: {}", self.rl.gpu_mode()?))?;
                } else {
                    let m: GpuMode = arg.parse().map_err(|_| plan_err(format!(".gpu expects off, auto or on, not '{arg}'")))?;
                    self.rl.set_gpu_mode(m)?;
                    w(results, &format!("gpu mode: {m}"))?;
                }
            }
            ".format" | ".mode" => {
                if arg.is_empty() {
                    let name = format!("{:?}", self.display.format).to_ascii_lowercase();
                    w(results, &format!("format: {name}"))?;
                } else {
                    self.display.format =
                        arg.parse().map_err(|_| plan_err(format!("{cmd} expects table, csv or json, not '{arg}'")))?;
                }
            }
            ".maxrows" => {
                let n: usize = arg.parse().map_err(|_| plan_err(format!(".maxrows expects a number of rows (0: all), not '{arg}'")))?;
                self.display.max_rows = (n > 0).then_some(n);
            }
            ".explain" => {
                if arg.is_empty() {
                    return Err(plan_err(".explain needs a statement"));
                }
                for s in split_statements(&arg) {
                    run_statement(&self.rl, s.sql, self.display, true, results).await.map_err(|e| s.locate(e))?;
                }
            }
            ".read" => {
                if arg.is_empty() {
                    return Err(plan_err(".read needs a file name"));
                }
                return self.read_file(Path::new(&arg), results).await;
            }
            ".output" | ".once" => {
                if let Some(mut r) = self.redirect.take() {
                    r.file.flush().map_err(io)?;
                }
                if arg.is_empty() {
                    if cmd == ".once" {
                        return Err(plan_err(".once needs a file name"));
                    }
                } else {
                    let f = std::fs::File::create(&arg).map_err(|e| plan_err(format!("cannot write {arg}: {e}")))?;
                    self.redirect = Some(Redirect { file: std::io::BufWriter::new(f), once: cmd == ".once" });
                }
            }
            other => return Err(plan_err(format!("unknown command {other}; try .help"))),
        }
        Ok(true)
    }

    /// Runs the SQL and dot commands of a file as a script (stopping at its first
    /// error, which names the file; positions count from the file's start).
    /// Returns false if the file ran `.quit`.
    pub fn read_file<'a>(&'a mut self, path: &'a Path, out: &'a mut dyn Write) -> Pin<Box<dyn Future<Output = Result<bool>> + 'a>> {
        Box::pin(async move {
            if self.depth >= MAX_READ_DEPTH {
                return Err(plan_err(format!(".read: files read each other more than {MAX_READ_DEPTH} deep")));
            }
            let text = std::fs::read_to_string(path).map_err(|e| plan_err(format!("cannot read {}: {e}", path.display())))?;
            self.depth += 1;
            let r = self.run_text(&text, out).await;
            self.depth -= 1;
            r.map_err(|e| if is_interrupted(&e) { e } else { DataFusionError::Context(format!("in {}", path.display()), Box::new(e)) })
        })
    }

    /// Runs a text (`-c SQL`, a `-f` or `.read` file) line by line as a script:
    /// it stops at the first error, which it returns; false if it ran `.quit`.
    /// The shell's settings (format, timer, ...) carry on after it.
    pub async fn run_text(&mut self, text: &str, out: &mut dyn Write) -> Result<bool> {
        let saved = (std::mem::take(&mut self.pending), self.lines, self.pending_from, self.script_positions);
        (self.lines, self.pending_from, self.script_positions) = (0, 0, true);
        let r = async {
            for line in text.lines() {
                if self.interrupt.count() != self.scope {
                    return Err(interrupted());
                }
                if !self.line(line, out).await? {
                    return Ok(false);
                }
            }
            self.finish(out).await.map(|()| true)
        }
        .await;
        (self.pending, self.lines, self.pending_from, self.script_positions) = saved;
        self.sync_pending();
        r
    }

    /// Runs a complete statement (or several); pieces of only comments are skipped.
    pub async fn statement(&mut self, sql: &str, out: &mut dyn Write) -> Result<()> {
        self.scope = self.interrupt.count();
        self.with_output(out, |shell, results, console| Box::pin(shell.statement_at(sql.to_string(), 0, results, console))).await
    }

    /// Runs `f` with results going to the `.output`/`.once` file, if any, else to `out`.
    async fn with_output<'s, T>(
        &'s mut self,
        out: &'s mut dyn Write,
        f: impl for<'x> FnOnce(&'x mut Shell, &'x mut dyn Write, &'x mut dyn Write) -> Pin<Box<dyn Future<Output = Result<T>> + 'x>>,
    ) -> Result<T> {
        let mut redirect = self.redirect.take();
        let r = match redirect.as_mut() {
            Some(rd) => {
                let r = f(self, &mut rd.file, out).await;
                let _ = rd.file.flush();
                r
            }
            None => {
                // The console is `out` too: its lines (the timer's) follow the result.
                let mut console = Vec::new();
                let r = f(self, out, &mut console).await;
                let _ = out.write_all(&console);
                r
            }
        };
        // A command that set its own (`.read` of a file that ran `.output`) keeps it.
        if self.redirect.is_none() {
            self.redirect = redirect.filter(|r| !r.once);
        }
        r
    }

    /// [`Shell::statement`] for text that starts after `first_line` lines of the
    /// input; `console` takes the timer's lines (`results` may be a file).
    async fn statement_at(&mut self, sql: String, first_line: usize, results: &mut dyn Write, console: &mut dyn Write) -> Result<()> {
        let t = Instant::now();
        for mut s in split_statements(&sql) {
            s.line += first_line;
            let progress = Progress::start(self.progress_after);
            let mut watched = Watched { out: &mut *results, progress: &progress };
            let run = catch(run_statement(&self.rl, s.sql, self.display, false, &mut watched));
            let r = tokio::select! {
                biased;
                () = self.interrupt.after(self.scope) => Err(interrupted()),
                r = run => r,
            };
            progress.stop();
            r.map_err(|e| s.locate(e))?;
        }
        if self.timer {
            writeln!(console, "time: {:.3} ms", t.elapsed().as_secs_f64() * 1e3).map_err(io)?;
        }
        Ok(())
    }

    /// Takes one input line: a dot command (at the start of a statement), an
    /// exit word (`exit`, `quit`, `\q`), or SQL added to the pending text, which
    /// runs once it is complete (see [`super::output::Scan::complete`]: a `;`
    /// inside a string or comment does not end it). Returns false on `.quit`. A
    /// panic becomes an error.
    pub async fn line(&mut self, line: &str, out: &mut dyn Write) -> Result<bool> {
        if self.depth == 0 {
            self.scope = self.interrupt.count();
        }
        self.lines += 1;
        if self.pending.is_empty() {
            self.pending_from = self.lines - 1;
        }
        let r = self.line_inner(line, out).await;
        self.sync_pending();
        let _ = out.flush();
        r
    }

    async fn line_inner(&mut self, line: &str, out: &mut dyn Write) -> Result<bool> {
        let at_start = self.pending.trim().is_empty();
        let word = line.trim().trim_end_matches(';').trim_end();
        if at_start && (word.eq_ignore_ascii_case("exit") || word.eq_ignore_ascii_case("quit") || word == "\\q") {
            self.pending.clear();
            return Ok(false);
        }
        if at_start && line.trim_start().starts_with('\\') {
            self.pending.clear();
            return match word {
                "\\?" | "\\h" => writeln!(out, "{HELP}").map(|()| true).map_err(io),
                _ => Err(plan_err(format!("unknown command {}; try .help (\\q quits)", line.trim()))),
            };
        }
        if at_start && line.trim_start().starts_with('.') {
            self.pending.clear();
            let cmd = line.trim().to_string();
            if cmd.starts_with(".output") || cmd.starts_with(".once") {
                return catch(self.dot(&cmd, out)).await;
            }
            return self.with_output(out, move |shell, results, _| Box::pin(async move { catch(shell.dot(&cmd, results)).await })).await;
        }
        self.pending.push_str(line);
        self.pending.push('\n');
        let sc = scan(&self.pending);
        if sc.complete() {
            let sql = std::mem::take(&mut self.pending);
            let first = self.first_line();
            self.with_output(out, move |shell, results, console| Box::pin(shell.statement_at(sql, first, results, console))).await?;
        } else if !sc.open && sc.pieces.len() == 1 && !sc.pieces[0].meaningful {
            // Only whitespace and comments so far: nothing is pending.
            self.pending.clear();
        }
        Ok(true)
    }

    /// Whether SQL is pending (read but not yet ended by `;`).
    pub fn has_pending(&self) -> bool {
        !self.pending.trim().is_empty()
    }

    /// Runs what is pending at the end of the input (a last statement without `;`).
    pub async fn finish(&mut self, out: &mut dyn Write) -> Result<()> {
        let sql = std::mem::take(&mut self.pending);
        self.sync_pending();
        if sql.trim().is_empty() {
            return Ok(());
        }
        let first = self.first_line();
        let r = self.with_output(out, move |shell, results, console| Box::pin(shell.statement_at(sql, first, results, console))).await;
        let _ = out.flush();
        r
    }

    fn first_line(&self) -> usize {
        if self.script_positions {
            self.pending_from
        } else {
            0
        }
    }

    /// Drops the pending text (Ctrl-C while typing).
    pub fn clear(&mut self) {
        self.pending.clear();
        self.sync_pending();
    }
}

/// Runs the shell: interactive on a terminal, else a script read from standard
/// input (`ridgeline < script.sql`). A script stops at its first error, which
/// is returned (printed as one line, exit code 1), as DuckDB's shell does when
/// its input is not a terminal; the interactive shell prints errors and goes
/// on. A closed standard output ends either quietly.
pub async fn run(rl: Ridgeline) -> Result<()> {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        interactive(rl).await
    } else {
        script(rl, std::io::stdin().lock()).await
    }
}

/// Runs texts (`-c SQL`, `-f FILE`) as scripts, one after the other, stopping
/// at the first error (an error in a file names it).
pub async fn run_texts(rl: Ridgeline, texts: &[(Option<PathBuf>, String)]) -> Result<()> {
    let mut shell = Shell::for_script(rl);
    let mut out = Stdout::new();
    for (path, text) in texts {
        let r = shell.run_text(text, &mut out).await;
        let go_on = r.map_err(|e| match path {
            Some(p) => DataFusionError::Context(format!("in {}", p.display()), Box::new(e)),
            None => e,
        })?;
        if !go_on || stdout_closed() {
            break;
        }
    }
    Ok(())
}

/// Runs a script line by line, stopping at the first error.
pub async fn script(rl: Ridgeline, mut input: impl std::io::BufRead) -> Result<()> {
    let mut shell = Shell::for_script(rl);
    let mut out = Stdout::new();
    let mut line = String::new();
    loop {
        line.clear();
        let n = input.read_line(&mut line).map_err(io)?;
        if n == 0 {
            break;
        }
        let l = line.strip_suffix('\n').unwrap_or(&line);
        let l = l.strip_suffix('\r').unwrap_or(l);
        if !shell.line(l, &mut out).await? {
            return Ok(());
        }
    }
    shell.finish(&mut out).await
}

/// The history file: `~/.ridgeline_history`.
fn history_file() -> Option<PathBuf> {
    std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| PathBuf::from(h).join(".ridgeline_history"))
}

async fn interactive(rl: Ridgeline) -> Result<()> {
    let mut shell = Shell::new(rl);
    let config = rustyline::Config::builder()
        .completion_type(rustyline::CompletionType::List)
        .auto_add_history(false)
        .build();
    let mut editor: rustyline::Editor<Helper, rustyline::history::FileHistory> = rustyline::Editor::with_config(config).map_err(|e| DataFusionError::External(Box::new(e)))?;
    editor.set_helper(Some(Helper::new(shell.completion.clone())));
    let history = history_file();
    if let Some(h) = &history {
        let _ = editor.load_history(h);
    }
    // Ctrl-C while a statement runs (the terminal is not in raw mode then)
    // is SIGINT: it interrupts the statement. At the prompt, the line editor
    // reads it as a key and drops the line being typed.
    let interrupter = shell.interrupter();
    let signals = tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            interrupter.interrupt();
        }
    });
    shell.refresh_names().await;
    let _ = writeln!(std::io::stderr(), "Ridgeline {} (gpu mode: {}); .help for commands, statements end with ';'", env!("CARGO_PKG_VERSION"), shell.rl.gpu_mode()?);
    let mut out = Stdout::new();
    loop {
        let prompt = if shell.has_pending() { "      ...> " } else { "ridgeline> " };
        match editor.readline(prompt) {
            Ok(line) => {
                // History holds whole statements and dot commands, saved as they come.
                let entry = format!("{}{line}", shell.pending);
                let r = shell.line(&line, &mut out).await;
                if !shell.has_pending() && !entry.trim().is_empty() {
                    let _ = editor.add_history_entry(entry.trim());
                    if let Some(h) = &history {
                        let _ = editor.append_history(h);
                    }
                }
                match r {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => {
                        let _ = out.flush();
                        let _ = writeln!(std::io::stderr(), "error: {}", error_line(&e));
                    }
                }
                if stdout_closed() {
                    break;
                }
                shell.refresh_names().await;
            }
            Err(rustyline::error::ReadlineError::Interrupted) => shell.clear(),
            Err(_) => break,
        }
    }
    signals.abort();
    if !stdout_closed() {
        if let Err(e) = shell.finish(&mut out).await {
            report_error(&e);
        }
    }
    Ok(())
}

