//! The interactive shell: multi-line statements ended by `;`, history, and dot
//! commands (`.tables`, `.schema NAME`, `.timer on|off`, `.gpu off|auto|on`).
use super::output::{report_error, run_statement, run_statements, scan, split_statements, stdout_closed, Format, Stdout};
use crate::guard::catch;
use crate::{GpuMode, Ridgeline};
use datafusion::error::{DataFusionError, Result};
use std::io::Write;
use std::time::Instant;

const HELP: &str = ".tables             list tables
.schema NAME        show a table's columns
.timer on|off       print each statement's time
.gpu off|auto|on    where operators run
.format table|csv|json
.explain SQL        physical plan, GPU nodes marked
.help               this text
.quit               leave";

/// Shell state.
pub struct Shell {
    rl: Ridgeline,
    timer: bool,
    format: Format,
    /// SQL read but not yet ended by `;`.
    pending: String,
    /// Input lines taken so far, and the line where `pending` began.
    lines: usize,
    pending_from: usize,
    /// Error positions count lines from the start of the input (a script), not
    /// from the statement's start (the interactive shell).
    script_positions: bool,
}

impl Shell {
    /// A shell over an engine.
    pub fn new(rl: Ridgeline) -> Self {
        Shell { rl, timer: false, format: Format::Table, pending: String::new(), lines: 0, pending_from: 0, script_positions: false }
    }

    /// Handles a dot command; returns false on `.quit`.
    pub async fn dot(&mut self, line: &str, out: &mut dyn Write) -> Result<bool> {
        let mut parts = line.split_whitespace();
        let cmd = parts.next().unwrap_or("");
        let arg = parts.collect::<Vec<_>>().join(" ");
        let w = |out: &mut dyn Write, s: &str| writeln!(out, "{s}").map_err(|e| DataFusionError::External(Box::new(e)));
        match cmd {
            ".quit" | ".exit" | ".q" => return Ok(false),
            ".help" => w(out, HELP)?,
            ".tables" => {
                run_statements(&self.rl, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name", self.format, false, out).await?
            }
            ".schema" => {
                if arg.is_empty() {
                    return Err(DataFusionError::Plan(".schema needs a table name".into()));
                }
                let df = self.rl.session().table(arg.as_str()).await?;
                for f in df.schema().fields() {
                    w(out, &format!("{} {}{}", f.name(), f.data_type(), if f.is_nullable() { "" } else { " NOT NULL" }))?;
                }
            }
            ".timer" => match arg.as_str() {
                "on" => self.timer = true,
                "off" => self.timer = false,
                _ => return Err(DataFusionError::Plan(".timer on|off".into())),
            },
            ".gpu" => {
                if arg.is_empty() {
                    w(out, &format!("gpu mode: {}", self.rl.gpu_mode()?))?;
                } else {
                    let m: GpuMode = arg.parse().map_err(DataFusionError::Plan)?;
                    self.rl.set_gpu_mode(m)?;
                    w(out, &format!("gpu mode: {m}"))?;
                }
            }
            ".format" => self.format = arg.parse().map_err(DataFusionError::Plan)?,
            ".explain" => run_statements(&self.rl, &arg, self.format, true, out).await?,
            other => return Err(DataFusionError::Plan(format!("unknown command {other}; try .help"))),
        }
        Ok(true)
    }

    /// Runs a complete statement (or several); pieces of only comments are skipped.
    pub async fn statement(&mut self, sql: &str, out: &mut dyn Write) -> Result<()> {
        self.statement_at(sql, 0, out).await
    }

    /// [`Shell::statement`] for text that starts after `first_line` lines of the input.
    async fn statement_at(&mut self, sql: &str, first_line: usize, out: &mut dyn Write) -> Result<()> {
        let t = Instant::now();
        for mut s in split_statements(sql) {
            s.line += first_line;
            run_statement(&self.rl, s.sql, self.format, false, out).await.map_err(|e| s.locate(e))?;
        }
        if self.timer {
            writeln!(out, "time: {:.3} ms", t.elapsed().as_secs_f64() * 1e3).map_err(|e| DataFusionError::External(Box::new(e)))?;
        }
        Ok(())
    }

    /// Takes one input line: a dot command (at the start of a statement), or SQL
    /// added to the pending text, which runs once it is complete (see
    /// [`super::output::Scan::complete`]: a `;` inside a string or comment does not end it).
    /// Returns false on `.quit`. A panic becomes an error.
    pub async fn line(&mut self, line: &str, out: &mut dyn Write) -> Result<bool> {
        self.lines += 1;
        if self.pending.is_empty() {
            self.pending_from = self.lines - 1;
        }
        if self.pending.trim().is_empty() && line.trim_start().starts_with('.') {
            self.pending.clear();
            let r = catch(self.dot(line.trim(), out)).await;
            let _ = out.flush();
            return r;
        }
        self.pending.push_str(line);
        self.pending.push('\n');
        let sc = scan(&self.pending);
        if sc.complete() {
            let sql = std::mem::take(&mut self.pending);
            let r = catch(self.statement_at(&sql, self.first_line(), out)).await;
            let _ = out.flush();
            r?;
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
        if sql.trim().is_empty() {
            return Ok(());
        }
        let r = catch(self.statement_at(&sql, self.first_line(), out)).await;
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

    /// Drops the pending text (Ctrl-C).
    pub fn clear(&mut self) {
        self.pending.clear();
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

/// Runs a script line by line, stopping at the first error.
pub async fn script(rl: Ridgeline, mut input: impl std::io::BufRead) -> Result<()> {
    let mut shell = Shell::new(rl);
    shell.script_positions = true;
    let mut out = Stdout::new();
    let mut line = String::new();
    loop {
        line.clear();
        let n = input.read_line(&mut line).map_err(|e| DataFusionError::External(Box::new(e)))?;
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

async fn interactive(rl: Ridgeline) -> Result<()> {
    let mut shell = Shell::new(rl);
    let mut editor = rustyline::DefaultEditor::new().map_err(|e| DataFusionError::External(Box::new(e)))?;
    let history = std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".ridgeline_history"));
    if let Some(h) = &history {
        let _ = editor.load_history(h);
    }
    let _ = writeln!(std::io::stderr(), "Ridgeline {} (gpu mode: {}); .help for commands, statements end with ';'", env!("CARGO_PKG_VERSION"), shell.rl.gpu_mode()?);
    let mut out = Stdout::new();
    loop {
        let prompt = if shell.has_pending() { "      ...> " } else { "ridgeline> " };
        match editor.readline(prompt) {
            Ok(line) => {
                // History holds whole statements and dot commands.
                let entry = format!("{}{line}", shell.pending);
                let r = shell.line(&line, &mut out).await;
                if !shell.has_pending() && !entry.trim().is_empty() {
                    let _ = editor.add_history_entry(entry.trim());
                }
                match r {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => report_error(&e),
                }
                if stdout_closed() {
                    break;
                }
            }
            Err(rustyline::error::ReadlineError::Interrupted) => shell.clear(),
            Err(_) => break,
        }
    }
    if !stdout_closed() {
        if let Err(e) = shell.finish(&mut out).await {
            report_error(&e);
        }
    }
    if let Some(h) = &history {
        let _ = editor.save_history(h);
    }
    Ok(())
}
